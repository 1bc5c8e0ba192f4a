// Package buildinfo says which build of pulse is running: the version every
// service logs at start, reports as service.version on its traces and
// exports as pulse_build_info{service,version}, and the one `pulse
// --version` prints. It lives in the SDK module, with no dependencies, so
// the CLI shares the rule without linking server code.
package buildinfo

import (
	"runtime/debug"
	"strings"
	"sync"
)

// Stamp, when set at link time (-ldflags "-X
// github.com/pulsequeue/pulse/pkg/buildinfo.Stamp=v1.2.3"), is the
// version, whatever the build info says. Images built with -buildvcs=false
// use it to carry their tag.
var Stamp string

// Unknown is the version of a build that carries neither a module version
// nor a VCS revision (go build -buildvcs=false of a working tree).
const Unknown = "(devel)"

// Version is this binary's version: Stamp if set; else the main module's
// version when the build knows one (go install …@v1.2.3, or a VCS-stamped
// pseudo-version); else the VCS revision, shortened to 12 hex digits, with
// "-dirty" when the tree had uncommitted changes; else Unknown.
var Version = sync.OnceValue(func() string {
	if Stamp != "" {
		return Stamp
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Unknown
	}
	return FromBuildInfo(bi)
})

// FromBuildInfo is Version's rule applied to bi (Stamp aside).
func FromBuildInfo(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != Unknown {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return Unknown
	}
	if len(rev) > 12 && !strings.ContainsAny(rev[:12], "-+") {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}
