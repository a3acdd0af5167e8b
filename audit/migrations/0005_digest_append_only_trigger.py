"""Make signed digests append-only, like the events they anchor (see 0003).

Deleting the newest digests would quietly shorten what later exports can prove; the
trigger rejects UPDATE and DELETE whoever issues them.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION audit_digest_reject_mutation() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'audit digests are append-only: % on audit_auditdigest is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER audit_digest_append_only
    BEFORE UPDATE OR DELETE ON audit_auditdigest
    FOR EACH ROW EXECUTE FUNCTION audit_digest_reject_mutation();
"""

DROP = """
DROP TRIGGER IF EXISTS audit_digest_append_only ON audit_auditdigest;
DROP FUNCTION IF EXISTS audit_digest_reject_mutation();
"""


class Migration(migrations.Migration):
    dependencies = [("audit", "0004_exports_digests_signing_keys")]

    operations = [migrations.RunSQL(CREATE, DROP)]
