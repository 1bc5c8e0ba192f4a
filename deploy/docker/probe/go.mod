module github.com/pulsequeue/pulse/deploy/docker/probe

go 1.26.0
