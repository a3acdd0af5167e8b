"""Make audit events append-only in the database itself.

A trigger rejects every UPDATE and DELETE on audit_auditevent, whoever issues it (the
application, an admin shell, a compromised code path). TRUNCATE is a separate privilege:
production should run the application as a role that does not own the table (see the
README), so it cannot TRUNCATE or drop the trigger either.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION audit_event_reject_mutation() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'audit events are append-only: % on audit_auditevent is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER audit_event_append_only
    BEFORE UPDATE OR DELETE ON audit_auditevent
    FOR EACH ROW EXECUTE FUNCTION audit_event_reject_mutation();
"""

DROP = """
DROP TRIGGER IF EXISTS audit_event_append_only ON audit_auditevent;
DROP FUNCTION IF EXISTS audit_event_reject_mutation();
"""


class Migration(migrations.Migration):
    dependencies = [("audit", "0002_initial")]

    operations = [migrations.RunSQL(CREATE, DROP)]
