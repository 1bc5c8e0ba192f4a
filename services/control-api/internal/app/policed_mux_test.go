package app

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// A route the access policy does not name exactly is caught when it is
// mounted: left alone, auth.HTTPPolicy would admit it with the /v1/
// fallback's roles (producers), not refuse it.
func TestEveryRouteHasItsOwnPolicyEntry(t *testing.T) {
	t.Parallel()
	policy := AccessPolicy()
	m := &policedMux{mux: http.NewServeMux(), policy: policy}
	for pattern := range policy {
		m.Handle(pattern, http.NotFoundHandler())
	}
	require.Empty(t, m.unlisted)
	m.Handle("POST /v1/topics/{topic}/something-new", http.NotFoundHandler())
	require.Equal(t, []string{"POST /v1/topics/{topic}/something-new"}, m.unlisted)
}
