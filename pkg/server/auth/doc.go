// Package auth authenticates callers of control-api and dispatch-gateway and
// checks their role, on gRPC and HTTP alike.
//
// Credentials are configured on the server only: PULSE_AUTH_USERS holds HTTP
// Basic users (plain passwords or bcrypt hashes) and PULSE_AUTH_TOKENS holds
// bearer tokens, each entry with one role:
//
//   - producer: submit jobs and read them;
//   - worker: stream jobs, heartbeat and report results;
//   - operator: everything, including cancel, retry, pause and resume.
//
// A Policy maps each gRPC method and HTTP route to the roles it admits.
// Anything the policy does not name is for operators only, so a route added
// without a policy entry fails closed. The gRPC health service admits any
// authenticated caller and reflection operators only; the HTTP policy marks
// the probes and /metrics Public.
//
// On gRPC the check runs in the server's tap handle (TapHandle), before a
// call's message is read; on HTTP, in Middleware, before its body is read.
// Failed attempts are limited per source address and per user name
// (Limits), and refusals are counted by reason (OnRefusal).
//
// PULSE_AUTH_CERTS maps the common names of verified client certificates
// (PULSE_TLS_CLIENT_CA) to identities, which the same decision admits.
//
// Settings reads every security variable once for a service: credentials are
// required (PULSE_AUTH=required, the default) unless PULSE_AUTH=none asks for
// open mode, in which the Authenticator is nil and every caller is Anonymous,
// an operator — for local development only; LogOpenMode says so loudly at
// start. Users and tokens on a plaintext listener beyond loopback are refused
// unless PULSE_ALLOW_PLAINTEXT_CREDENTIALS=true (ADR-0031).
//
// Handlers learn who is calling with IdentityFrom, for example to record the
// actor of an operator action.
package auth
