module github.com/pulsequeue/pulse/tools

go 1.26.7

require golang.org/x/mod v0.43.0
