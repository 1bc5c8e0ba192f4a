package metrics

import (
	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/pulsequeue/pulse/pkg/buildinfo"
)

// NewRegistry returns a registry holding the Go runtime and process
// collectors, pulse_service_info{service="<service>"} 1, which lets a
// dashboard tell which service a scrape target runs without relying on the
// scrape configuration's job names, and
// pulse_build_info{service,version} 1 (buildinfo.Version). A private
// registry (not the global default) keeps tests and services from sharing
// collectors.
func NewRegistry(service string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "pulse_service_info",
		Help:        "Always 1; labels identify the pulse service behind this endpoint.",
		ConstLabels: prometheus.Labels{"service": service},
	})
	info.Set(1)
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "pulse_build_info",
		Help:        "Always 1; labels name the service and the build it runs (module version or VCS revision).",
		ConstLabels: prometheus.Labels{"service": service, "version": buildinfo.Version()},
	})
	build.Set(1)
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		info,
		build,
	)
	return reg
}

// GRPCServerMetrics returns grpc_server_* metrics, including the
// grpc_server_handling_seconds histogram, registered on reg; pass the result
// to grpcserver.Options. It panics if reg already holds them, as
// prometheus.MustRegister does: that is a wiring bug.
func GRPCServerMetrics(reg prometheus.Registerer) *grpcprom.ServerMetrics {
	m := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
	reg.MustRegister(m)
	return m
}
