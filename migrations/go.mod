module github.com/pulsequeue/pulse/migrations

go 1.26.0
