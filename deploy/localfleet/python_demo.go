package localfleet

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DemoWorkerPython is the Python SDK's demo (sdk/python/examples/demo_worker.py):
// a producer and a worker on PythonDemoTopic, started beside the Go demo.
const DemoWorkerPython = "demo-worker-python"

// PythonDemoTopic is the topic the Python demo produces to and works.
const PythonDemoTopic = "py.thumbnail.render"

// pythonDemoScript is the Python demo's path under the repository root.
var pythonDemoScript = filepath.Join("sdk", "python", "examples", "demo_worker.py")

// pythonInterpreter is PULSE_PYTHON, else Debian's /usr/bin/python3, else
// python3 on PATH: the first that imports grpc and google.protobuf. It
// returns "" when none does.
func pythonInterpreter(ctx context.Context) string {
	candidates := []string{os.Getenv("PULSE_PYTHON"), "/usr/bin/python3", "python3"}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if err := exec.CommandContext(ctx, c, "-c", "import grpc, google.protobuf").Run(); err == nil {
			return c
		}
	}
	return ""
}

// startPythonDemo runs the Python SDK's demo, or says loudly why not: a
// machine without Python's grpcio still gets the rest of the fleet.
func (f *Fleet) startPythonDemo(ctx context.Context) error {
	py := pythonInterpreter(ctx)
	if py == "" {
		f.logger.Warn("not starting the Python demo worker: no python3 that imports grpc and google.protobuf (run sdk/python/scripts/ensure-deps.sh, or set PULSE_PYTHON)")
		return nil
	}
	env := map[string]string{
		"PULSE_GATEWAY_ADDRS":    strings.Join(f.GatewayAddrs, ","),
		"PULSE_CONTROL_API_ADDR": f.ControlGRPC,
		"PULSE_DEMO_TOPIC":       PythonDemoTopic,
	}
	if f.DevCredentials() {
		env["PULSE_USER"], env["PULSE_PASSWORD"] = DevWorkerUser, DevWorkerPassword
		env["PULSE_PRODUCER_USER"], env["PULSE_PRODUCER_PASSWORD"] = DevProducerUser, DevProducerPassword
	}
	p, err := Start(ctx, DemoWorkerPython, py, f.env(env), f.LogDir, filepath.Join(f.opts.RepoRoot, pythonDemoScript))
	if err != nil {
		return err
	}
	f.Processes = append(f.Processes, p)
	f.logger.Info("started", "process", DemoWorkerPython, "pid", p.PID(), "log", p.LogPath)
	return f.waitWorking(ctx, p)
}
