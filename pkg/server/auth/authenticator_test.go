package auth_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/crypto/bcrypt"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/auth/authtest"
	"github.com/pulsequeue/pulse/pkg/server/config"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cheapHash is a bcrypt hash at the minimum cost, so tests stay fast; the
// server accepts any cost.
func cheapHash(t *testing.T, pw string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
	require.NoError(t, err)
	return string(h)
}

func TestNew(t *testing.T) {
	t.Parallel()

	t.Run("BothEmptyIsOpenMode", func(t *testing.T) {
		t.Parallel()
		a, err := auth.New("", " ")
		require.NoError(t, err)
		require.Nil(t, a)
		id, err := a.Authenticate("")
		require.NoError(t, err)
		require.Equal(t, auth.Anonymous, id)
	})

	t.Run("AcceptsGoodEntries", func(t *testing.T) {
		t.Parallel()
		hash := cheapHash(t, "s3cret")
		for name, spec := range map[string][2]string{
			"OnePlainUser":           {"alice:producer:pw", ""},
			"SpacesAroundEntries":    {" alice:producer:pw , bob:worker:pw2 ", ""},
			"SecretWithColons":       {"alice:operator:a:b:c", ""},
			"BcryptHash2a":           {"alice:operator:" + hash, ""},
			"BcryptHash2b":           {"alice:operator:$2b$" + strings.TrimPrefix(hash, "$2a$"), ""},
			"BcryptHash2y":           {"alice:operator:$2y$" + strings.TrimPrefix(hash, "$2a$"), ""},
			"TokensOnly":             {"", "ci:producer:tok-1,gw:worker:tok-2"},
			"UsersAndTokensSameName": {"ci:operator:pw", "ci:producer:tok"},
			"NameCharset":            {"svc.billing_prod-1@eu:producer:pw", ""},
		} {
			_, err := auth.New(spec[0], spec[1])
			require.NoError(t, err, name)
		}
	})

	t.Run("RejectsBadEntriesNamingTheVariableAndEntryButNoSecret", func(t *testing.T) {
		t.Parallel()
		const secret = "hunter2"
		cases := []struct {
			name, users, tokens, envVar, want string
		}{
			{"EmptyEntry", "a:producer:" + secret + ",", "", auth.UsersVar, "entry 2 is empty"},
			{"TwoParts", "a:" + secret, "", auth.UsersVar, "entry 1 is not name:role:secret"},
			{"EmptyName", ":producer:" + secret, "", auth.UsersVar, "entry 1: the name"},
			{"BadNameChar", "a b:producer:" + secret, "", auth.UsersVar, "entry 1: the name"},
			// A slash would let a name forge another's lease holder prefix.
			{"SlashInName", "a/b:worker:" + secret, "", auth.UsersVar, "entry 1: the name"},
			{"SlashInTokenName", "", "a/b:worker:" + secret, auth.TokensVar, "entry 1: the name"},
			{"UnknownRole", "a:admin:" + secret, "", auth.UsersVar, `entry 1 (a): role "admin" is not producer, worker or operator`},
			{"EmptySecret", "a:producer:", "", auth.UsersVar, "entry 1 (a): the secret is empty"},
			{"DuplicateUser", "a:producer:" + secret + ",a:worker:x", "", auth.UsersVar, "entry 2: user a is listed twice"},
			{"BrokenBcrypt", "a:producer:$2a$10$" + secret, "", auth.UsersVar, "not one"},
			{"TokenUnknownRole", "", "ci:root:" + secret, auth.TokensVar, `entry 1 (ci): role "root"`},
			{"TokenTwoParts", "", "ci:" + secret, auth.TokensVar, "entry 1 is not name:role:secret"},
			{"DuplicateToken", "", "a:producer:" + secret + ",b:worker:" + secret, auth.TokensVar, "entries 1 and 2 carry the same token"},
		}
		for _, tc := range cases {
			a, err := auth.New(tc.users, tc.tokens)
			require.Error(t, err, tc.name)
			require.Nil(t, a, tc.name)
			var ce *config.Error
			require.ErrorAs(t, err, &ce, tc.name)
			require.Equal(t, tc.envVar, ce.Var, tc.name)
			require.Contains(t, err.Error(), tc.want, tc.name)
			require.NotContains(t, err.Error(), secret, "%s: the error must not print the secret", tc.name)
		}
	})

	t.Run("ParseUsersAndParseTokensAreNewWithOneVariable", func(t *testing.T) {
		t.Parallel()
		a, err := auth.ParseUsers("a:producer:pw")
		require.NoError(t, err)
		_, err = a.Authenticate(authtest.Bearer("pw"))
		require.ErrorIs(t, err, apierr.ErrUnauthenticated)

		a, err = auth.ParseTokens("a:producer:pw")
		require.NoError(t, err)
		id, err := a.Authenticate(authtest.Bearer("pw"))
		require.NoError(t, err)
		require.Equal(t, auth.Identity{Name: "a", Role: auth.RoleProducer}, id)
	})
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()

	type testBundle struct{ a *auth.Authenticator }
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		a, err := auth.New(
			"prod:producer:pp,op:operator:"+cheapHash(t, "op-pass")+",wk:worker:w:with:colons",
			"ci:operator:ci-token,gw:worker:gw-token")
		require.NoError(t, err)
		return &testBundle{a: a}
	}

	t.Run("AcceptsGoodCredentials", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cases := map[string]auth.Identity{
			authtest.Basic("prod", "pp"):                {Name: "prod", Role: auth.RoleProducer},
			authtest.Basic("op", "op-pass"):             {Name: "op", Role: auth.RoleOperator},
			authtest.Basic("wk", "w:with:colons"):       {Name: "wk", Role: auth.RoleWorker},
			authtest.Bearer("ci-token"):                 {Name: "ci", Role: auth.RoleOperator},
			authtest.Bearer("gw-token"):                 {Name: "gw", Role: auth.RoleWorker},
			"basic " + authtest.Basic("prod", "pp")[6:]: {Name: "prod", Role: auth.RoleProducer},
			"  bearer   ci-token ":                      {Name: "ci", Role: auth.RoleOperator}, //nolint:gocritic // the whitespace is the input under test
		}
		for header, want := range cases {
			id, err := b.a.Authenticate(header)
			require.NoError(t, err, header)
			require.Equal(t, want, id, header)
		}
	})

	t.Run("BcryptVerifiesRepeatedlyAndRejectsAfterASuccess", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for range 3 { // the first verifies with bcrypt, the rest hit the cache
			id, err := b.a.Authenticate(authtest.Basic("op", "op-pass"))
			require.NoError(t, err)
			require.Equal(t, "op", id.Name)
		}
		_, err := b.a.Authenticate(authtest.Basic("op", "op-pass2"))
		require.ErrorIs(t, err, apierr.ErrUnauthenticated, "a cached success admits only that password")
	})

	t.Run("WrongUserAndWrongPasswordFailAlike", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		headers := []string{
			authtest.Basic("nobody", "pp"),   // unknown user
			authtest.Basic("prod", "wrong"),  // plain password wrong
			authtest.Basic("op", "wrong"),    // bcrypt password wrong
			authtest.Basic("prod", ""),       // empty password
			authtest.Basic("PROD", "pp"),     // names are case-sensitive
			authtest.Bearer("nope"),          // unknown token
			authtest.Bearer("pp"),            // a password is not a token
			authtest.Basic("ci", "ci-token"), // a token is not a password
			"Basic " + "not base64!",         // undecodable
			"Basic " + "cHJvZA==",            // "prod" without a colon
			"Bearer",                         // no token at all
		}
		var first string
		for _, h := range headers {
			_, err := b.a.Authenticate(h)
			require.ErrorIs(t, err, apierr.ErrUnauthenticated, h)
			if first == "" {
				first = err.Error()
			}
			require.Equal(t, first, err.Error(), "%q must fail exactly like the others", h)
			require.NotContains(t, err.Error(), "user")
			require.NotContains(t, err.Error(), "password")
		}
	})

	t.Run("MissingAndUnsupportedSchemesAreUnauthenticated", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, h := range []string{"", "   ", "Digest username=prod", "pp"} {
			_, err := b.a.Authenticate(h)
			require.ErrorIs(t, err, apierr.ErrUnauthenticated, h)
		}
	})
}

func TestHashPassword(t *testing.T) {
	t.Parallel()

	t.Run("HashesAtCost10AndTheHashAuthenticates", func(t *testing.T) {
		t.Parallel()
		h, err := auth.HashPassword("correct horse")
		require.NoError(t, err)
		cost, err := bcrypt.Cost([]byte(h))
		require.NoError(t, err)
		require.Equal(t, auth.PasswordCost, cost)
		require.Equal(t, 10, cost)

		a, err := auth.ParseUsers("alice:operator:" + h)
		require.NoError(t, err)
		id, err := a.Authenticate(authtest.Basic("alice", "correct horse"))
		require.NoError(t, err)
		require.Equal(t, auth.RoleOperator, id.Role)
	})

	t.Run("RefusesAnEmptyOrTooLongPassword", func(t *testing.T) {
		t.Parallel()
		_, err := auth.HashPassword("")
		require.Error(t, err)
		_, err = auth.HashPassword(strings.Repeat("x", 73))
		require.Error(t, err)
	})
}
