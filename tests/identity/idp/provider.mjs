// A real OpenID Provider for the tests: the certified `oidc-provider` package, configured
// from a JSON file (argv[2]) written by tests/identity/conftest.py:
//   {"issuer", "port", "clients": [...], "accounts_file", "clock_skew_seconds"}
// Accounts are re-read from accounts_file at every lookup, so a test can change a
// person's groups between two logins. The login page is oidc-provider's own development
// interaction (any password; the account id is the login name typed).
import { readFileSync } from 'node:fs';

import Provider from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));

if (config.clock_skew_seconds) {
  // An IdP host whose clock is wrong: every token it issues is dated accordingly.
  const realNow = Date.now.bind(Date);
  Date.now = () => realNow() + config.clock_skew_seconds * 1000;
}

function accounts() {
  return JSON.parse(readFileSync(config.accounts_file, 'utf8'));
}

const DAY = 24 * 60 * 60;

const provider = new Provider(config.issuer, {
  clients: config.clients,
  cookies: { keys: ['cacheplane-test-idp-cookie-key'] },
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'preferred_username', 'given_name', 'family_name'],
    groups: ['groups'],
  },
  scopes: ['openid', 'offline_access', 'email', 'profile', 'groups'],
  pkce: { required: () => true },
  ttl: {
    // Long enough that a skewed clock (above) does not expire the browser's cookies.
    Interaction: DAY,
    Session: DAY,
    Grant: DAY,
    AuthorizationCode: 60,
    AccessToken: 3600,
    IdToken: 3600,
  },
  async findAccount(ctx, id) {
    const account = accounts()[id];
    if (!account) return undefined;
    return {
      accountId: id,
      async claims() {
        return {
          sub: id,
          email: account.email,
          email_verified: true,
          name: account.name,
          preferred_username: account.preferred_username || id,
          groups: account.groups || [],
        };
      },
    };
  },
  async loadExistingGrant(ctx) {
    // Consent is granted by configuration (as an enterprise IdP does for its own apps).
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope('openid email profile groups');
    grant.addOIDCClaims(['email', 'groups', 'preferred_username', 'name']);
    await grant.save();
    return grant;
  },
});

provider.on('server_error', (ctx, error) => console.error('server_error', error));

const server = provider.listen(config.port, '127.0.0.1', () => {
  console.log(`ready ${config.issuer}`);
});
// Exit at once: keep-alive connections from the tests would hold server.close() open.
process.on('SIGTERM', () => process.exit(0));
