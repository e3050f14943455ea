package gateway

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/admit"
	"github.com/switchyard-llm/switchyard/internal/cli"
)

func TestParseFlags(t *testing.T) {
	env := map[string]string{"SWITCHYARD_KAFKA_BROKERS": "k1:9092,k2:9092"}
	cfg, err := ParseFlags([]string{"--cluster", "eu", "--engines", "a=http://127.0.0.1:1,b=http://127.0.0.1:2", "--models", "m1, m2", "--nats-url", ""},
		func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Cluster != "eu" || len(cfg.Engines) != 2 || cfg.Engines[1].URL != "http://127.0.0.1:2" || len(cfg.Models) != 2 || cfg.LogLevel != "info" {
		t.Fatalf("%+v", cfg)
	}
	if len(cfg.KafkaBrokers) != 2 || cfg.NATSURL != "" || cfg.Listen != "127.0.0.1:8080" {
		t.Fatalf("connection %+v", cfg)
	}
	if cfg.HTTPServer != "fast" {
		t.Errorf("default http server %q", cfg.HTTPServer)
	}
	if cfg.EngineClient != "own" {
		t.Errorf("default engine client %q", cfg.EngineClient)
	}
	if !cfg.AdaptiveConcurrency || cfg.AdmissionQueue.MaxQueue != 1024 || cfg.AdmissionQueue.Timeout != admit.DefaultTimeout || cfg.PriorityHeader || cfg.APIKeys != "" || cfg.AdminListen != "" {
		t.Errorf("admission defaults %+v", cfg)
	}
	cfg, err = ParseFlags([]string{"--cluster", "eu", "--adaptive-concurrency=false", "--admission-queue", "8", "--admission-timeout", "250ms",
		"--api-keys", "keys.yaml", "--priority-header", "--admin-listen", "127.0.0.1:9090"}, func(string) string { return "" })
	if err != nil || cfg.AdaptiveConcurrency || cfg.AdmissionQueue.MaxQueue != 8 || cfg.AdmissionQueue.Timeout != 250*time.Millisecond ||
		cfg.APIKeys != "keys.yaml" || !cfg.PriorityHeader || cfg.AdminListen != "127.0.0.1:9090" {
		t.Errorf("admission flags %+v %v", cfg, err)
	}
	if cfg.TrustTenantHeader {
		t.Error("--trust-tenant-header on by default")
	}
	if cfg, err := ParseFlags([]string{"--cluster", "eu", "--trust-tenant-header"}, func(string) string { return "" }); err != nil || !cfg.TrustTenantHeader {
		t.Errorf("--trust-tenant-header: %v %v", cfg.TrustTenantHeader, err)
	}
	if cfg, err := ParseFlags([]string{"--cluster", "eu"}, func(k string) string { return map[string]string{"SWITCHYARD_TRUST_TENANT_HEADER": "true"}[k] }); err != nil || !cfg.TrustTenantHeader {
		t.Errorf("SWITCHYARD_TRUST_TENANT_HEADER=true: %v %v", cfg.TrustTenantHeader, err)
	}
	if cfg, err := ParseFlags([]string{"--cluster", "eu"}, func(string) string { return "" }); err != nil || !cfg.RawSyscalls {
		t.Errorf("--raw-syscalls off by default: %v %v", cfg.RawSyscalls, err)
	}
	if cfg, err := ParseFlags([]string{"--cluster", "eu", "--raw-syscalls=false"}, func(string) string { return "" }); err != nil || cfg.RawSyscalls {
		t.Errorf("--raw-syscalls=false: %v %v", cfg.RawSyscalls, err)
	}
	if cfg, err := ParseFlags([]string{"--cluster", "eu"}, func(k string) string { return map[string]string{"SWITCHYARD_RAW_SYSCALLS": "false"}[k] }); err != nil || cfg.RawSyscalls {
		t.Errorf("SWITCHYARD_RAW_SYSCALLS=false: %v %v", cfg.RawSyscalls, err)
	}
	if cfg, err := ParseFlags([]string{"--cluster", "eu"}, func(k string) string { return map[string]string{"SWITCHYARD_HTTP_SERVER": "std"}[k] }); err != nil || cfg.HTTPServer != "std" {
		t.Errorf("SWITCHYARD_HTTP_SERVER=std: %q %v", cfg.HTTPServer, err)
	}
	if cfg, err := ParseFlags([]string{"--cluster", "eu"}, func(string) string { return "" }); err != nil || cfg.PeerLoadInterval != 100*time.Millisecond || cfg.GatewayID == "" {
		t.Errorf("peer load defaults: interval %v, id %q, %v", cfg.PeerLoadInterval, cfg.GatewayID, err)
	}
	peerEnv := map[string]string{"SWITCHYARD_PEER_LOAD_INTERVAL": "0", "SWITCHYARD_GATEWAY_ID": "gw-1"}
	if cfg, err := ParseFlags([]string{"--cluster", "eu"}, func(k string) string { return peerEnv[k] }); err != nil || cfg.PeerLoadInterval != 0 || cfg.GatewayID != "gw-1" {
		t.Errorf("SWITCHYARD_PEER_LOAD_INTERVAL=0 SWITCHYARD_GATEWAY_ID=gw-1: interval %v, id %q, %v", cfg.PeerLoadInterval, cfg.GatewayID, err)
	}
	if cfg, err := ParseFlags([]string{"--cluster", "eu"}, func(string) string { return "" }); err != nil || cfg.DrainDelay != 5*time.Second || cfg.DrainTimeout != 50*time.Second {
		t.Errorf("drain defaults: delay %v, timeout %v, %v", cfg.DrainDelay, cfg.DrainTimeout, err)
	}
	if cfg, err := ParseFlags([]string{"--cluster", "eu", "--drain-delay", "0s", "--drain-timeout", "2m"}, func(string) string { return "" }); err != nil || cfg.DrainDelay != 0 || cfg.DrainTimeout != 2*time.Minute {
		t.Errorf("--drain-delay 0s --drain-timeout 2m: delay %v, timeout %v, %v", cfg.DrainDelay, cfg.DrainTimeout, err)
	}
	if cfg, err := ParseFlags([]string{"--cluster", "eu", "--pick-score-slack", "0.05", "--pick-score-slack-ms", "5"}, func(string) string { return "" }); err != nil || cfg.Pick.ScoreSlack != 0.05 || cfg.Pick.ScoreSlackMs != 5 {
		t.Errorf("--pick-score-slack 0.05 --pick-score-slack-ms 5: %+v, %v", cfg.Pick, err)
	}
	for _, args := range [][]string{
		{},
		{"--cluster", "eu", "--drain-delay", "-1s"},
		{"--cluster", "eu", "--drain-timeout", "0s"},
		{"--cluster", "eu", "--drain-delay", "10s", "--drain-timeout", "10s"},
		{"--cluster", "eu", "--peer-load-interval", "-1s"},
		{"--cluster", "eu", "--peer-load-interval", "1us"},
		{"--cluster", "eu", "--pick-score-slack", "0"},
		{"--cluster", "eu", "--pick-score-slack", "NaN"},
		{"--cluster", "eu", "--pick-score-slack-ms", "-5"},
		{"--cluster", "eu", "--pick-score-slack-ms", "+Inf"},
		{"--cluster", "eu", "--gateway-id", strings.Repeat("g", 1025)},
		{"--cluster", "eu", "--engines", "nourl"},
		{"--cluster", "eu", "--engines", "a=ftp://x"},
		{"--cluster", "eu", "extra"},
		{"--cluster", "eu", "--bogus"},
		{"--cluster", "eu", "--http-server", "fastest"},
		{"--cluster", "eu", "--engine-client", "fastest"},
	} {
		if _, err := ParseFlags(args, func(string) string { return "" }); !errors.Is(err, cli.ErrUsage) {
			t.Errorf("%q: %v, want usage error", args, err)
		}
	}
}
