package e2e_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// The shape of the attack: eight concurrent calls, each one gzip-compressed
// message of 60 MiB of zeros (about 60 KiB on the wire).
const (
	bombCalls     = 8
	bombSize      = 60 << 20
	rssAllowance  = 64 << 20 // what all the refused calls together may add to peak RSS
	refusalAuthz  = "ops:operator:ops-pw,pat:producer:pat-pw,wk:worker:wk-pw"
	wrongPassword = "pat:not-the-password"
)

// TestRefusedCallsCostOnlyTheirHeaders (ADR-0029): real control-api and
// dispatch-gateway binaries with authentication on. Unauthenticated gRPC
// calls carrying 60 MiB of zeros, gzip-compressed, to every method of
// every service — health and reflection included — are answered
// Unauthenticated without being read, and so are wrong-role calls
// (PermissionDenied): together they add less than 64 MiB to either
// process's peak RSS. The same for HTTP bodies. An authenticated
// producer's oversized message on a small method is ResourceExhausted; a
// database failure answers a correlation id the log holds, and no database
// text; repeated bad passwords are rate limited.
func TestRefusedCallsCostOnlyTheirHeaders(t *testing.T) {
	t.Parallel()
	f := upFleet(t, localfleet.Options{Gateways: 1, Env: map[string]string{"PULSE_AUTH_USERS": refusalAuthz}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bomb := gzipZeros(t, bombSize)
	pids := f.PIDs()
	control, gateway := pids[localfleet.ControlAPI], pids[localfleet.DispatchGateway+"-1"]
	require.NotZero(t, control)
	require.NotZero(t, gateway)

	controlConn := bombConn(t, f.ControlGRPC, bomb)
	gatewayConn := bombConn(t, f.GatewayAddrs[0], bomb)
	controlMethods := []bombTarget{
		{"/pulse.v1.ControlService/SubmitJobs", false},
		{"/pulse.v1.ControlService/SubmitJob", false},
		{"/pulse.v1.ControlService/GetJob", false},
		{"/pulse.v1.ControlService/ListJobs", false},
		{"/pulse.v1.DispatchControlService/PauseDispatch", false},
		{"/pulse.v1.ScheduleService/CreateSchedule", false},
		{"/pulse.v1.TopicService/SetTopicLimit", false},
		{"/grpc.health.v1.Health/Check", false},
		{"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", true},
	}
	gatewayMethods := []bombTarget{
		{"/pulse.v1.DispatchService/StreamJobs", true},
		{"/pulse.v1.DispatchService/Heartbeat", false},
		{"/pulse.v1.DispatchService/ReportResult", false},
		{"/grpc.health.v1.Health/Check", false},
		{"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", true},
	}

	t.Run("UnauthenticatedAndWrongRoleGRPCCallsAreRefusedUnread", func(t *testing.T) {
		before := map[int]int64{control: peakRSS(t, control), gateway: peakRSS(t, gateway)}
		for _, m := range controlMethods {
			bombard(ctx, t, controlConn, m, "", codes.Unauthenticated)
		}
		for _, m := range gatewayMethods {
			bombard(ctx, t, gatewayConn, m, "", codes.Unauthenticated)
		}
		// Good credentials, wrong role: refused before decoding too.
		bombard(ctx, t, controlConn, bombTarget{"/pulse.v1.ControlService/SubmitJobs", false}, basic("wk:wk-pw"), codes.PermissionDenied)
		bombard(ctx, t, controlConn, bombTarget{"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", true}, basic("pat:pat-pw"), codes.PermissionDenied)
		bombard(ctx, t, gatewayConn, bombTarget{"/pulse.v1.DispatchService/ReportResult", false}, basic("ops:ops-pw"), codes.PermissionDenied)
		bombard(ctx, t, gatewayConn, bombTarget{"/pulse.v1.DispatchService/StreamJobs", true}, basic("pat:pat-pw"), codes.PermissionDenied)
		for pid, was := range before {
			grew := peakRSS(t, pid) - was
			t.Logf("pid %d: peak RSS %d KiB before, grew %d KiB", pid, was>>10, grew>>10)
			require.Less(t, grew, int64(rssAllowance), "pid %d's peak RSS grew by %d bytes", pid, grew)
		}
	})

	t.Run("UnauthenticatedHTTPBodiesAreNotRead", func(t *testing.T) {
		was := peakRSS(t, control)
		for _, route := range []struct{ method, path string }{
			{http.MethodPost, "/v1/jobs:batch"},
			{http.MethodPost, "/v1/jobs"},
			{http.MethodPut, "/v1/topics/e2e.bomb"},
		} {
			var wg sync.WaitGroup
			answers := make([]int, bombCalls)
			for i := range bombCalls {
				wg.Go(func() {
					req, err := http.NewRequestWithContext(ctx, route.method, f.ControlHTTP+route.path, bytes.NewReader(bomb))
					if err != nil {
						t.Error(err)
						return
					}
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Content-Encoding", "gzip")
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Errorf("%s %s: %v", route.method, route.path, err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					answers[i] = resp.StatusCode
				})
			}
			wg.Wait()
			for _, c := range answers {
				require.Equal(t, http.StatusUnauthorized, c, "%s %s", route.method, route.path)
			}
		}
		grew := peakRSS(t, control) - was
		require.Less(t, grew, int64(rssAllowance), "control-api's peak RSS grew by %d bytes", grew)
	})

	t.Run("AProducersOversizedMessageOnASmallMethodIsResourceExhausted", func(t *testing.T) {
		cc := dial(t, f.ControlGRPC)
		// 2 MiB of args: more than a single submit may carry (1 MiB + 64 KiB),
		// well within the batch bound.
		args := []byte(`"` + strings.Repeat("a", 2<<20) + `"`)
		_, err := pulsev1.NewControlServiceClient(cc).SubmitJob(withAuth(ctx, basic("pat:pat-pw")),
			&pulsev1.SubmitJobRequest{Job: &pulsev1.JobSpec{Topic: "e2e.big", Args: args}})
		require.Equal(t, codes.ResourceExhausted, status.Code(err), err)
		// The same bytes in a batch are the batch's to judge: past the
		// transport, refused for what they are.
		_, err = pulsev1.NewControlServiceClient(cc).SubmitJobs(withAuth(ctx, basic("pat:pat-pw")),
			&pulsev1.SubmitJobsRequest{Jobs: []*pulsev1.JobSpec{{Topic: "e2e.big", Args: args}}})
		require.Equal(t, codes.InvalidArgument, status.Code(err), err)
	})

	t.Run("ADatabaseFailureAnswersACorrelationIDAndNoDatabaseText", func(t *testing.T) {
		require.NoError(t, f.Cluster.Crash(ctx))
		cc := dial(t, f.ControlGRPC)
		_, err := pulsev1.NewControlServiceClient(cc).GetJob(withAuth(ctx, basic("pat:pat-pw")),
			&pulsev1.GetJobRequest{Id: "0198e6f2-7c1a-7000-8000-000000000001"})
		st := status.Convert(err)
		require.Contains(t, []codes.Code{codes.Unavailable, codes.Internal}, st.Code(), err)
		id := requireConcealed(t, st.Message(), f.DatabaseURL)
		requireLogged(t, processNamed(t, f, localfleet.ControlAPI), id)

		req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.ControlHTTP+"/v1/jobs/0198e6f2-7c1a-7000-8000-000000000001", nil)
		require.NoError(t, err)
		req.SetBasicAuth("pat", "pat-pw")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.GreaterOrEqual(t, resp.StatusCode, 500, string(body))
		id = requireConcealed(t, string(body), f.DatabaseURL)
		requireLogged(t, processNamed(t, f, localfleet.ControlAPI), id)

		resp, err = http.Get(f.ControlHTTP + "/readyz")
		require.NoError(t, err)
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		require.Contains(t, string(body), `"failed":"database"`)
		requireNoDatabaseText(t, string(body), f.DatabaseURL)
	})

	// Last: it spends this address's allowance of failed attempts.
	t.Run("RepeatedBadPasswordsAreRateLimited", func(t *testing.T) {
		// A user name's allowance is 10 failures at once and one every 5 s
		// after (an address's, 30 and one a second): far more attempts
		// than that arrive before enough seconds pass.
		limited := 0
		for range 200 {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.ControlHTTP+"/v1/jobs", nil)
			require.NoError(t, err)
			user, pass, _ := strings.Cut(wrongPassword, ":")
			req.SetBasicAuth(user, pass)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusTooManyRequests {
				require.NotEmpty(t, resp.Header.Get("Retry-After"))
				limited++
				break
			}
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		}
		require.Equal(t, 1, limited, "bad passwords were never rate limited")
		_, err := pulsev1.NewControlServiceClient(dial(t, f.ControlGRPC)).GetJob(withAuth(ctx, basic("pat:pat-pw")),
			&pulsev1.GetJobRequest{Id: "0198e6f2-7c1a-7000-8000-000000000001"})
		require.Equal(t, codes.ResourceExhausted, status.Code(err), "the address is limited on gRPC too, good password or not: %v", err)
	})

	t.Run("EveryRefusalIsCountedByReason", func(t *testing.T) {
		c := refusalCounts(ctx, t, f.AdminURLs[localfleet.ControlAPI])
		require.GreaterOrEqual(t, c["missing"], float64(bombCalls*(len(controlMethods)+3)), "gRPC bombs and HTTP bodies without credentials")
		require.GreaterOrEqual(t, c["forbidden"], float64(2*bombCalls))
		require.GreaterOrEqual(t, c["invalid"], float64(10), "a user name's allowance of failed attempts")
		require.GreaterOrEqual(t, c["rate_limited"], float64(2))
		g := refusalCounts(ctx, t, f.AdminURLs[localfleet.DispatchGateway+"-1"])
		require.GreaterOrEqual(t, g["missing"], float64(bombCalls*len(gatewayMethods)))
		require.GreaterOrEqual(t, g["forbidden"], float64(2*bombCalls))
	})
}

// bombTarget is a method to send the compressed zeros to; stream methods
// are opened as bidirectional streams.
type bombTarget struct {
	method string
	stream bool
}

// bombard makes bombCalls concurrent calls of m on cc, each carrying the
// compressed zeros, with authorization (or none), and requires every
// answer to be want.
func bombard(ctx context.Context, t *testing.T, cc *grpc.ClientConn, m bombTarget, authorization string, want codes.Code) {
	t.Helper()
	if authorization != "" {
		ctx = withAuth(ctx, authorization)
	}
	got := make([]error, bombCalls)
	var wg sync.WaitGroup
	for i := range bombCalls {
		wg.Go(func() {
			// The message is a placeholder: the connection's compressor
			// sends the zeros instead.
			msg := wrapperspb.String("x")
			if !m.stream {
				got[i] = cc.Invoke(ctx, m.method, msg, new(wrapperspb.StringValue))
				return
			}
			cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, m.method)
			if err != nil {
				got[i] = err
				return
			}
			_ = cs.SendMsg(msg) // io.EOF once the server refused the stream
			got[i] = cs.RecvMsg(new(wrapperspb.StringValue))
		})
	}
	wg.Wait()
	for _, err := range got {
		require.Equal(t, want, status.Code(err), "%s: %v", m.method, err)
	}
}

// bombCompressor is a gzip "compressor" that sends blob, the gzip of the
// zeros, whatever the message: the client compresses nothing per call.
type bombCompressor struct{ blob []byte }

func (c bombCompressor) Do(w io.Writer, _ []byte) error {
	_, err := w.Write(c.blob)
	return err
}

func (bombCompressor) Type() string { return "gzip" }

func bombConn(t *testing.T, addr string, blob []byte) *grpc.ClientConn {
	t.Helper()
	//nolint:staticcheck // WithCompressor is the per-connection way to send a fixed compressed payload.
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithCompressor(bombCompressor{blob: blob}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func gzipZeros(t *testing.T, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	require.NoError(t, err)
	zeros := make([]byte, 1<<20)
	for range n / len(zeros) {
		_, err := zw.Write(zeros)
		require.NoError(t, err)
	}
	require.NoError(t, zw.Close())
	require.Less(t, buf.Len(), n/100, "the zeros compress a hundredfold at least")
	return buf.Bytes()
}

func basic(userPass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(userPass))
}

func withAuth(ctx context.Context, authorization string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", authorization)
}

// peakRSS is the process's peak resident set (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	fh, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	require.NoError(t, sc.Err())
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

var correlationIDRE = regexp.MustCompile(`correlation id ([0-9a-f]{16})\)`)

// requireConcealed requires msg to carry a correlation id and nothing of
// the database's connection settings, and returns the id.
func requireConcealed(t *testing.T, msg, databaseURL string) string {
	t.Helper()
	m := correlationIDRE.FindStringSubmatch(msg)
	require.NotNil(t, m, "no correlation id in %q", msg)
	requireNoDatabaseText(t, msg, databaseURL)
	return m[1]
}

func requireNoDatabaseText(t *testing.T, msg, databaseURL string) {
	t.Helper()
	for _, leak := range []string{"user=", "database=", "host=", "dial", "connect", "pgx", "SQLSTATE"} {
		require.NotContains(t, msg, leak)
	}
	// Nothing of the URL either: its user, host:port and database name.
	rest, _ := strings.CutPrefix(databaseURL, "postgres://")
	rest, _ = strings.CutPrefix(rest, "postgresql://")
	for _, part := range strings.FieldsFunc(rest, func(r rune) bool { return strings.ContainsRune("@/:?&=", r) }) {
		if _, err := strconv.Atoi(part); err == nil || len(part) < 4 || part == "disable" || part == "sslmode" {
			continue // a port could turn up in a random id; a short word anywhere
		}
		{
			require.NotContains(t, msg, part, "the answer names part of the database URL")
		}
	}
}

func processNamed(t *testing.T, f *localfleet.Fleet, name string) *localfleet.Process {
	t.Helper()
	for _, p := range f.Processes {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no process %s in the fleet", name)
	return nil
}

// logPatience bounds the wait for a process's log line to reach the test.
const logPatience = time.Minute

// requireLogged waits for p's log to hold an ERROR line carrying the
// correlation id.
func requireLogged(t *testing.T, p *localfleet.Process, correlationID string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for line := range strings.SplitSeq(p.Logs(), "\n") {
			if strings.Contains(line, `"correlation_id":"`+correlationID+`"`) && strings.Contains(line, `"level":"ERROR"`) {
				return true
			}
		}
		return false
	}, logPatience, 10*time.Millisecond, "no ERROR line of %s carries correlation id %s", p.Name, correlationID)
}

var refusalLineRE = regexp.MustCompile(`^pulse_auth_refusals_total\{reason="([a-z_]+)"\} ([0-9.e+]+)$`)

// refusalCounts scrapes pulse_auth_refusals_total from a service's
// /metrics, by reason.
func refusalCounts(ctx context.Context, t *testing.T, adminURL string) map[string]float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, adminURL+"/metrics", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if m := refusalLineRE.FindStringSubmatch(sc.Text()); m != nil {
			v, err := strconv.ParseFloat(m[2], 64)
			require.NoError(t, err)
			out[m[1]] = v
		}
	}
	require.NoError(t, sc.Err())
	require.Len(t, out, 4, "every reason is exported from the start")
	return out
}
