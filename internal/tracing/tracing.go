// Package tracing sets up OpenTelemetry tracing from the standard OTEL_*
// environment variables, as distribution does (it has no configuration
// keys for it): off unless OTEL_TRACES_EXPORTER is "otlp", or is unset and
// an OTLP endpoint is given (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). The exporter speaks OTLP over
// HTTP/protobuf, or gRPC with OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL=grpc,
// and reads its other settings (headers, TLS, timeouts) and the sampler
// (OTEL_TRACES_SAMPLER) from the environment too. The service is named by
// OTEL_SERVICE_NAME, default "cairn".
package tracing

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracing is the process's tracer provider and how trace context travels
// in HTTP headers (W3C traceparent and baggage).
type Tracing struct {
	Provider   trace.TracerProvider
	Propagator propagation.TextMapPropagator
	// Enabled is false when tracing is off (a no-op provider).
	Enabled bool
	// Shutdown flushes the spans not yet exported.
	Shutdown func(context.Context) error
}

// Tracer returns the tracer of a cairn package.
func (t *Tracing) Tracer(pkg string) trace.Tracer {
	return t.Provider.Tracer("github.com/cairn-registry/cairn/" + pkg)
}

// Setup builds tracing from the environment getenv reads.
func Setup(ctx context.Context, version string, getenv func(string) string) (*Tracing, error) {
	off := &Tracing{Provider: noop.NewTracerProvider(), Propagator: propagation.TraceContext{}, Shutdown: func(context.Context) error { return nil }}
	exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	endpoint := getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	switch {
	case strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true"), exp == "none", exp == "" && !endpoint:
		return off, nil
	case exp != "" && exp != "otlp":
		return nil, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER=%s is not supported (otlp or none)", exp)
	}
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var (
		exporter sdktrace.SpanExporter
		err      error
	)
	switch protocol {
	case "", "http/protobuf":
		exporter, err = otlptracehttp.New(ctx)
	case "grpc":
		exporter, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("tracing: OTLP protocol %q is not supported (http/protobuf or grpc)", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	name := getenv("OTEL_SERVICE_NAME")
	if name == "" {
		name = "cairn"
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithAttributes(
		attribute.String("service.name", name), attribute.String("service.version", version)))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	return &Tracing{
		Provider:   tp,
		Propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		Enabled:    true,
		Shutdown:   tp.Shutdown,
	}, nil
}
