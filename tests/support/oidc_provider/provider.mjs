// A certified OpenID provider for gpu-fleet's single sign-on tests: panva's oidc-provider, with its
// development interactions (any login that names a user in the users file, any password).
//
//   node provider.mjs --port 9000 --client-id gpufleet --client-secret s3cret \
//     --redirect-uri http://127.0.0.1:8000/oidc/callback/ --users users.json
//
// users.json: [{"sub": "alice", "email": "alice@example.com", "groups": ["acme:member"]}, ...]. It is
// read again at every lookup, so a test changes a user's groups by rewriting the file. The ID token
// and the userinfo response both carry `groups` (with the openid scope). One client, first-party:
// its consent is granted without asking. Prints "ready <issuer>" once it listens.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

import Provider from 'oidc-provider';

const { values: args } = parseArgs({
  options: {
    port: { type: 'string' },
    'client-id': { type: 'string' },
    'client-secret': { type: 'string' },
    'redirect-uri': { type: 'string' },
    users: { type: 'string' },
  },
});
for (const name of ['port', 'client-id', 'client-secret', 'redirect-uri', 'users']) {
  if (!args[name]) {
    console.error(`provider.mjs: --${name} is required`);
    process.exit(2);
  }
}

const issuer = `http://127.0.0.1:${args.port}`;
const users = () => JSON.parse(readFileSync(args.users, 'utf8'));
const signingKey = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' });

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: args['client-id'],
      client_secret: args['client-secret'],
      redirect_uris: [args['redirect-uri']],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_post',
    },
  ],
  cookies: { keys: [randomBytes(32).toString('hex')] },
  jwks: { keys: [{ ...signingKey, kid: 'test-signing-key', use: 'sig', alg: 'RS256' }] },
  claims: { openid: ['sub', 'groups'], email: ['email', 'email_verified'], profile: ['name'] },
  // Every claim the scopes grant goes into the ID token too, not only to the userinfo endpoint.
  conformIdTokenClaims: false,
  features: { devInteractions: { enabled: true } },
  async findAccount(ctx, sub) {
    const user = users().find((candidate) => candidate.sub === sub);
    if (!user) return undefined;
    return {
      accountId: sub,
      async claims() {
        return {
          sub,
          email: user.email,
          email_verified: true,
          name: user.name ?? sub,
          groups: user.groups ?? [],
        };
      },
    };
  },
  // The one client is first-party: what it asks for is granted without a consent page.
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) {
      const existing = await ctx.oidc.provider.Grant.find(grantId);
      if (existing) return existing;
    }
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope('openid email profile');
    await grant.save();
    return grant;
  },
});

const server = provider.listen(Number(args.port), '127.0.0.1', () => {
  console.log(`ready ${issuer}`);
});
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
