package auth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/sync/semaphore"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/config"
)

// The variables whose values New parses; its errors name them.
const (
	UsersVar  = "PULSE_AUTH_USERS"
	TokensVar = "PULSE_AUTH_TOKENS"
)

// PasswordCost is the bcrypt cost HashPassword uses: about 50 ms a verify,
// paid once per user and password since successful verifies are cached.
const PasswordCost = 10

// maxNameLen bounds a credentials name, which audit records carry.
const maxNameLen = 64

// nameRE is the charset of a credentials name: readable in an audit log,
// and free of the separators the variables and Basic auth use.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9._@-]+$`)

// The messages a failed authentication answers with. A wrong user and a
// wrong password get the same one, so probing cannot learn which users exist.
const (
	msgMissing     = "credentials required: send Authorization: Basic or Bearer"
	msgInvalid     = "invalid credentials"
	msgUnsupported = "unsupported authorization scheme: use Basic or Bearer"
)

// Authenticator checks the credentials a caller presents against the
// configured users and tokens. A nil *Authenticator means open mode.
type Authenticator struct {
	// key keys the HMAC digests secrets are compared by, so comparisons
	// take the same time whatever the lengths and no unsalted digest of a
	// password sits in memory.
	key    []byte
	users  map[string]*user
	tokens []token
	// certs maps a client certificate's common name to its identity
	// (PULSE_AUTH_CERTS; cert_identity.go).
	certs map[string]Identity
	// anyBcrypt makes an unknown user cost a bcrypt verify too, so timing
	// does not tell a wrong user from a wrong password.
	anyBcrypt bool

	// limits, fails and bcrypt bound what failed attempts may cost
	// (SetLimits); onRefusal counts refusals (OnRefusal).
	limits    Limits
	fails     *failures
	bcrypt    *semaphore.Weighted
	onRefusal func(Refusal)
}

type user struct {
	id Identity
	// Exactly one of digest (a plain password) and hash (bcrypt) is set.
	digest []byte
	hash   []byte
	// verified is the digest of the last password bcrypt accepted, so
	// the hot path compares digests instead of re-running bcrypt.
	verified atomic.Pointer[[]byte]
}

type token struct {
	id     Identity
	digest []byte
}

// New parses PULSE_AUTH_USERS and PULSE_AUTH_TOKENS. Both empty yields nil,
// which is open mode.
//
// users is a comma-separated list of name:role:secret entries, where secret
// is a plain password or a bcrypt hash ($2a$, $2b$ or $2y$, as `pulse
// passwd` prints); tokens is a comma-separated list of name:role:token
// entries for Bearer authentication. Secrets may contain colons but not
// commas; whitespace around an entry is ignored. Errors name the variable
// and the entry (counting from 1) and never quote a secret.
func New(users, tokens string) (*Authenticator, error) {
	if strings.TrimSpace(users) == "" && strings.TrimSpace(tokens) == "" {
		return nil, nil
	}
	a := &Authenticator{key: make([]byte, 32), users: map[string]*user{}}
	_, _ = rand.Read(a.key) // crypto/rand.Read never fails
	if err := a.parseUsers(users); err != nil {
		return nil, err
	}
	if err := a.parseTokens(tokens); err != nil {
		return nil, err
	}
	a.SetLimits(Limits{})
	return a, nil
}

// ParseUsers is New with PULSE_AUTH_USERS only.
func ParseUsers(spec string) (*Authenticator, error) { return New(spec, "") }

// ParseTokens is New with PULSE_AUTH_TOKENS only.
func ParseTokens(spec string) (*Authenticator, error) { return New("", spec) }

// entry is one name:role:secret item of either variable.
type entry struct {
	n            int // 1-based position, for errors
	name, secret string
	role         Role
}

func parseEntries(envVar, spec string) ([]entry, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, nil
	}
	var out []entry
	for i, raw := range strings.Split(spec, ",") {
		n := i + 1
		raw = strings.TrimSpace(raw)
		if raw == "" {
			return nil, config.Invalid(envVar, "entry %d is empty; want name:role:secret", n)
		}
		parts := strings.SplitN(raw, ":", 3)
		if len(parts) != 3 {
			return nil, config.Invalid(envVar, "entry %d is not name:role:secret", n)
		}
		name, roleName, secret := parts[0], parts[1], parts[2]
		if len(name) > maxNameLen || !nameRE.MatchString(name) {
			return nil, config.Invalid(envVar, "entry %d: the name must be 1 to %d letters, digits or . _ @ -", n, maxNameLen)
		}
		role, err := ParseRole(roleName)
		if err != nil {
			return nil, config.Invalid(envVar, "entry %d (%s): %v", n, name, err)
		}
		if secret == "" {
			return nil, config.Invalid(envVar, "entry %d (%s): the secret is empty", n, name)
		}
		out = append(out, entry{n: n, name: name, role: role, secret: secret})
	}
	return out, nil
}

func (a *Authenticator) parseUsers(spec string) error {
	entries, err := parseEntries(UsersVar, spec)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if _, dup := a.users[e.name]; dup {
			return config.Invalid(UsersVar, "entry %d: user %s is listed twice", e.n, e.name)
		}
		u := &user{id: Identity{Name: e.name, Role: e.role}}
		if isBcrypt(e.secret) {
			if _, err := bcrypt.Cost([]byte(e.secret)); err != nil {
				return config.Invalid(UsersVar, "entry %d (%s): the secret starts like a bcrypt hash but is not one", e.n, e.name)
			}
			u.hash = []byte(e.secret)
			a.anyBcrypt = true
		} else {
			u.digest = a.digest(e.secret)
		}
		a.users[e.name] = u
	}
	return nil
}

func (a *Authenticator) parseTokens(spec string) error {
	entries, err := parseEntries(TokensVar, spec)
	if err != nil {
		return err
	}
	for _, e := range entries {
		d := a.digest(e.secret)
		for j, t := range a.tokens {
			if hmac.Equal(t.digest, d) {
				return config.Invalid(TokensVar, "entries %d and %d carry the same token", entries[j].n, e.n)
			}
		}
		a.tokens = append(a.tokens, token{id: Identity{Name: e.name, Role: e.role}, digest: d})
	}
	return nil
}

func isBcrypt(s string) bool {
	return strings.HasPrefix(s, "$2a$") || strings.HasPrefix(s, "$2b$") || strings.HasPrefix(s, "$2y$")
}

func (a *Authenticator) digest(secret string) []byte {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(secret))
	return m.Sum(nil)
}

// Authenticate checks an Authorization value, "Basic base64(user:pass)" or
// "Bearer token", and returns who it belongs to. Missing or wrong
// credentials are apierr.Unauthenticated, with a message that never says
// whether the user or the password was wrong; every bcrypt slot busy is
// apierr.ResourceExhausted. A nil Authenticator (open mode) admits
// everyone as Anonymous. It neither counts nor limits failed attempts:
// the transports' checks (TapHandle, Middleware) do.
func (a *Authenticator) Authenticate(header string) (Identity, error) {
	return a.authenticate(context.Background(), header)
}

func (a *Authenticator) authenticate(ctx context.Context, header string) (Identity, error) {
	if a == nil {
		return Anonymous, nil
	}
	header = strings.TrimSpace(header)
	if header == "" {
		return Identity{}, apierr.Unauthenticated(msgMissing)
	}
	scheme, value, _ := strings.Cut(header, " ")
	value = strings.TrimSpace(value)
	switch {
	case strings.EqualFold(scheme, "Basic"):
		raw, err := base64.StdEncoding.DecodeString(value)
		if err != nil {
			return Identity{}, apierr.Unauthenticated(msgInvalid)
		}
		name, pass, ok := strings.Cut(string(raw), ":")
		if !ok {
			return Identity{}, apierr.Unauthenticated(msgInvalid)
		}
		return a.basic(ctx, name, pass)
	case strings.EqualFold(scheme, "Bearer"):
		return a.bearer(value)
	}
	return Identity{}, apierr.Unauthenticated(msgUnsupported)
}

func (a *Authenticator) basic(ctx context.Context, name, pass string) (Identity, error) {
	d := a.digest(pass)
	u, ok := a.users[name]
	if !ok {
		// Spend what a known user would, then fail the same way.
		if a.anyBcrypt {
			if err := a.verify(ctx, func() error { return bcrypt.CompareHashAndPassword(dummyHash(), []byte(pass)) }); errors.Is(err, errBusy) {
				return Identity{}, err
			}
		} else {
			_ = subtle.ConstantTimeCompare(d, a.digest(""))
		}
		return Identity{}, apierr.Unauthenticated(msgInvalid)
	}
	if u.hash == nil {
		if subtle.ConstantTimeCompare(d, u.digest) == 1 {
			return u.id, nil
		}
		return Identity{}, apierr.Unauthenticated(msgInvalid)
	}
	if v := u.verified.Load(); v != nil && subtle.ConstantTimeCompare(d, *v) == 1 {
		return u.id, nil
	}
	if err := a.verify(ctx, func() error { return bcrypt.CompareHashAndPassword(u.hash, []byte(pass)) }); err != nil {
		if errors.Is(err, errBusy) {
			return Identity{}, err
		}
		return Identity{}, apierr.Unauthenticated(msgInvalid)
	}
	u.verified.Store(&d)
	return u.id, nil
}

func (a *Authenticator) bearer(tok string) (Identity, error) {
	if tok == "" {
		return Identity{}, apierr.Unauthenticated(msgInvalid)
	}
	d := a.digest(tok)
	// Compare against every token, without stopping at a match, so the
	// time taken says nothing about which token came close.
	var found Identity
	matched := 0
	for _, t := range a.tokens {
		if subtle.ConstantTimeCompare(d, t.digest) == 1 {
			found, matched = t.id, 1
		}
	}
	if matched == 0 {
		return Identity{}, apierr.Unauthenticated(msgInvalid)
	}
	return found, nil
}

// dummyHash is what an unknown user's password is verified against, made
// once per process and only when some user has a bcrypt hash.
var dummyHash = sync.OnceValue(func() []byte {
	h, err := bcrypt.GenerateFromPassword([]byte(rand.Text()), PasswordCost)
	if err != nil {
		panic(fmt.Sprintf("auth: bcrypt: %v", err)) // only on a too-long password
	}
	return h
})

// HashPassword returns the bcrypt hash of pw at PasswordCost, for a
// PULSE_AUTH_USERS entry (`pulse passwd` prints it).
func HashPassword(pw string) (string, error) {
	if pw == "" {
		return "", errors.New("auth: the password is empty")
	}
	h, err := bcrypt.GenerateFromPassword([]byte(pw), PasswordCost)
	if err != nil {
		return "", fmt.Errorf("auth: hash password: %w", err)
	}
	return string(h), nil
}

// LogOpenMode warns, loudly, that a service is running without
// authentication (PULSE_AUTH=none); Security.Warn calls it at start.
func LogOpenMode(logger *slog.Logger) {
	logger.Warn("AUTHENTICATION IS OFF: every caller is an operator and may submit, cancel, retry, pause and resume; "+
		"this open mode ("+ModeVar+"="+string(ModeNone)+") is for local development only. Set "+UsersVar+", "+TokensVar+" or "+CertsVar+
		" and remove "+ModeVar+"="+string(ModeNone)+" to require credentials.",
		"auth", "open")
}
