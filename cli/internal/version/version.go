// Package version says which build of the pulse CLI is running, by the
// rule the services follow (pkg/server/buildinfo, which the CLI does not
// link): the link-time Stamp, else the module version of a
// `go install …@vX.Y.Z` build, else the VCS revision, else "(devel)".
package version

import (
	"runtime/debug"
	"sync"
)

// Stamp, when set at link time (-ldflags "-X
// github.com/pulsequeue/pulse/cli/internal/version.Stamp=v1.2.3"), is the
// version, whatever the build info says (make release sets it).
var Stamp string

// Unknown is the version of a build that carries neither a module version
// nor a VCS revision.
const Unknown = "(devel)"

// Version is this binary's version.
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

// FromBuildInfo is Version's rule applied to bi (Stamp aside): the main
// module's version, else the revision (12 hex digits, "-dirty" for a
// modified tree), else Unknown.
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
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}
