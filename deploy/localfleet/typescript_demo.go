package localfleet

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DemoWorkerTypeScript is the TypeScript SDK's demo (sdk/typescript/examples/demo.ts,
// built into dist/examples/demo.js): a producer and a worker on
// TypeScriptDemoTopic, started beside the Go demo.
const DemoWorkerTypeScript = "demo-worker-typescript"

// TypeScriptDemoTopic is the topic the TypeScript demo produces to and works.
const TypeScriptDemoTopic = "ts.greet"

// typeScriptDemoScript is the built demo's path under the repository root
// (make dev builds it: npm ci and npm run build in sdk/typescript).
var typeScriptDemoScript = filepath.Join("sdk", "typescript", "dist", "examples", "demo.js")

// startTypeScriptDemo runs the TypeScript SDK's demo, or says loudly why
// not: a machine without Node, or without the SDK built, still gets the
// rest of the fleet.
func (f *Fleet) startTypeScriptDemo(ctx context.Context) error {
	node, err := exec.LookPath("node")
	if err != nil {
		f.logger.Warn("not starting the TypeScript demo worker: node is not on PATH (the TypeScript SDK needs Node 20 or later)", "error", err)
		return nil // a missing Node leaves the rest of the fleet running, said loudly above
	}
	script := filepath.Join(f.opts.RepoRoot, typeScriptDemoScript)
	if _, err := os.Stat(script); err != nil {
		f.logger.Warn("not starting the TypeScript demo worker: the SDK is not built (cd sdk/typescript && npm ci)", "error", err)
		return nil // an unbuilt SDK leaves the rest of the fleet running, said loudly above
	}
	env := map[string]string{
		"PULSE_GATEWAY_ADDRS":    strings.Join(f.GatewayAddrs, ","),
		"PULSE_CONTROL_API_ADDR": f.ControlGRPC,
		"PULSE_DEMO_TOPIC":       TypeScriptDemoTopic,
	}
	if f.DevCredentials() {
		env["PULSE_USER"], env["PULSE_PASSWORD"] = DevWorkerUser, DevWorkerPassword
		env["PULSE_PRODUCER_USER"], env["PULSE_PRODUCER_PASSWORD"] = DevProducerUser, DevProducerPassword
	}
	p, err := Start(ctx, DemoWorkerTypeScript, node, f.env(env), f.LogDir, script)
	if err != nil {
		return err
	}
	f.Processes = append(f.Processes, p)
	f.logger.Info("started", "process", DemoWorkerTypeScript, "pid", p.PID(), "log", p.LogPath)
	return f.waitWorking(ctx, p)
}
