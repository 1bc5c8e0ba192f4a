module github.com/pulsequeue/pulse/services/reaper

go 1.26.0

replace (
	github.com/pulsequeue/pulse/migrations => ../../migrations
	github.com/pulsequeue/pulse/pkg => ../../pkg
	github.com/pulsequeue/pulse/pkg/server => ../../pkg/server
)
