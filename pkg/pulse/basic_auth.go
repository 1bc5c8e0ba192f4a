package pulse

import (
	"context"
	"encoding/base64"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// basicAuth sends HTTP Basic credentials as gRPC metadata on every RPC.
type basicAuth struct {
	user, pass string
}

var _ credentials.PerRPCCredentials = basicAuth{}

func (b basicAuth) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	token := base64.StdEncoding.EncodeToString([]byte(b.user + ":" + b.pass))
	return map[string]string{"authorization": "Basic " + token}, nil
}

// RequireTransportSecurity is false so Basic auth also works on the
// plaintext connections used inside a compose network or a cluster.
func (basicAuth) RequireTransportSecurity() bool { return false }

func insecureCredentials() credentials.TransportCredentials {
	return insecure.NewCredentials()
}
