package auth

import (
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"
)

func TestBcryptCache(t *testing.T) {
	t.Parallel()

	t.Run("RemembersOnlyASuccessfulVerify", func(t *testing.T) {
		t.Parallel()
		h, err := bcrypt.GenerateFromPassword([]byte("right"), bcrypt.MinCost)
		require.NoError(t, err)
		a, err := ParseUsers("op:operator:" + string(h))
		require.NoError(t, err)
		u := a.users["op"]
		basic := func(pw string) string {
			return "Basic " + base64.StdEncoding.EncodeToString([]byte("op:"+pw))
		}

		_, err = a.Authenticate(basic("wrong"))
		require.Error(t, err)
		require.Nil(t, u.verified.Load(), "a failure is never cached")

		_, err = a.Authenticate(basic("right"))
		require.NoError(t, err)
		cached := u.verified.Load()
		require.NotNil(t, cached)
		require.Equal(t, a.digest("right"), *cached, "keyed by the presented password's digest")
		require.NotContains(t, string(*cached), "right")

		_, err = a.Authenticate(basic("wrong"))
		require.Error(t, err)
		require.Same(t, cached, u.verified.Load(), "a later failure leaves the cache alone")
	})
}
