package main

import (
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"gopkg.in/yaml.v3"

	"github.com/switchyard-llm/switchyard/internal/cli"
)

// minNATSPayload is the largest message Switchyard publishes at the scale
// of issue 14: the audit message of a snapshot of 100 clusters x 20,000
// engines, about 12 MB (a 20,000-engine snapshot alone is ~2 MB).
const minNATSPayload = 12 << 20

// kafkaListeners parses KAFKA_LISTENERS or KAFKA_ADVERTISED_LISTENERS
// into listener name -> host:port (host may be empty).
func kafkaListeners(t *testing.T, where, v string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range splitList(v) {
		name, addr, ok := strings.Cut(l, "://")
		if _, _, err := net.SplitHostPort(addr); !ok || err != nil {
			t.Errorf("%s: listener %q is not NAME://host:port", where, l)
			continue
		}
		out[name] = addr
	}
	return out
}

// natsConfig parses the NATS configuration file a compose NATS service
// mounts (-c PATH) with nats-server's own parser and returns it with the
// --name the command gives.
func natsConfig(t *testing.T, name string, s composeService) (*server.Options, string) {
	t.Helper()
	var conf, serverName string
	for i, a := range s.Command {
		if i+1 < len(s.Command) {
			switch a {
			case "-c", "--config":
				conf = s.Command[i+1]
			case "-n", "--name", "--server_name":
				serverName = s.Command[i+1]
			}
		}
	}
	if conf == "" {
		t.Fatalf("nats service %s: command %v passes no -c configuration file", name, s.Command)
	}
	var hostPath string
	for _, v := range s.Volumes {
		if parts := strings.Split(v, ":"); len(parts) >= 2 && parts[1] == conf && strings.HasPrefix(parts[0], "./") {
			hostPath = filepath.Join("../..", parts[0])
		}
	}
	if hostPath == "" {
		t.Fatalf("nats service %s: configuration %s is not mounted from the repository (%v)", name, conf, s.Volumes)
	}
	setPasswordEnv(t) // auth.conf reads them from the environment
	opts, err := server.ProcessConfigFile(hostPath)
	if err != nil {
		t.Fatalf("nats service %s: %s: %v", name, hostPath, err)
	}
	return opts, serverName
}

// TestComposeCluster parses docker-compose.yml's "cluster" profile: three
// Kafka brokers forming one KRaft quorum (the same voters, cluster id
// and controller listener on each; every voter a broker of the profile
// under its node id), replication factor 3 and min.insync.replicas 2 on
// the brokers and in the flags of the commands that create topics; three
// NATS nodes whose configuration (parsed by nats-server) routes to all
// three, with JetStream on a volume and a max_payload that fits the 12 MB
// audit snapshot; and the -ha services reaching exactly those brokers, the
// optimizer creating the store with 3 replicas, and stream processing
// partitioned over three processor instances and one combiner
// (checkComposePartitioned). The default services
// depend on no service of the profile, so `docker compose up` is as
// before.
func TestComposeCluster(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(b, &cf); err != nil {
		t.Fatal(err)
	}
	var kafkas, natses []string
	for name, s := range cf.Services {
		deps, _ := s.DependsOn.(map[string]any)
		for dep := range deps {
			if d, ok := cf.Services[dep]; !ok {
				t.Errorf("service %s depends on %s, which is no service", name, dep)
			} else if len(d.Profiles) > 0 && !s.inProfile(d.Profiles[0]) {
				t.Errorf("service %s (profiles %v) depends on %s of profile %v: compose refuses it without the profile", name, s.Profiles, dep, d.Profiles)
			}
		}
		if !s.inProfile("cluster") {
			continue
		}
		switch {
		case strings.HasPrefix(s.Image, "apache/kafka:") && len(s.Command) == 0: // not kafka-setup-ha
			kafkas = append(kafkas, name)
		case strings.HasPrefix(s.Image, "nats:"):
			natses = append(natses, name)
		}
	}
	slices.Sort(kafkas)
	slices.Sort(natses)
	if len(kafkas) != 3 || len(natses) != 3 {
		t.Fatalf("profile cluster has Kafka brokers %v and NATS nodes %v, want three of each", kafkas, natses)
	}

	// Kafka: one KRaft quorum of the three.
	var (
		voters, clusterID string
		wantVoters        []string
		kafkaAddrs        []string // PLAINTEXT host:port of each broker
		hostPorts         = map[string]string{}
		volumes           = map[string]string{}
	)
	env0 := cf.Services[kafkas[0]].Environment
	for _, name := range kafkas {
		s := cf.Services[name]
		env := s.Environment
		where := "kafka service " + name
		if hc := s.Healthcheck; hc == nil || len(hc.Test) == 0 {
			t.Errorf("%s: no healthcheck", where)
		}
		roles := splitList(env["KAFKA_PROCESS_ROLES"])
		if !slices.Contains(roles, "broker") || !slices.Contains(roles, "controller") {
			t.Errorf("%s: process roles %v, want broker and controller", where, roles)
		}
		if voters == "" {
			voters, clusterID = env["KAFKA_CONTROLLER_QUORUM_VOTERS"], env["CLUSTER_ID"]
		}
		if env["KAFKA_CONTROLLER_QUORUM_VOTERS"] != voters || env["CLUSTER_ID"] != clusterID {
			t.Errorf("%s: voters %q and cluster id %q differ from %s's %q and %q", where,
				env["KAFKA_CONTROLLER_QUORUM_VOTERS"], env["CLUSTER_ID"], kafkas[0], voters, clusterID)
		}
		for _, k := range []string{"KAFKA_DEFAULT_REPLICATION_FACTOR", "KAFKA_MIN_INSYNC_REPLICAS", "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"} {
			if env[k] != env0[k] {
				t.Errorf("%s: %s %q, %s has %q", where, k, env[k], kafkas[0], env0[k])
			}
		}
		id, err := strconv.Atoi(env["KAFKA_NODE_ID"])
		if err != nil {
			t.Errorf("%s: KAFKA_NODE_ID %q: %v", where, env["KAFKA_NODE_ID"], err)
		}
		listeners := kafkaListeners(t, where, env["KAFKA_LISTENERS"])
		ctrl := env["KAFKA_CONTROLLER_LISTENER_NAMES"]
		_, ctrlPort, _ := net.SplitHostPort(listeners[ctrl])
		if ctrlPort == "" {
			t.Errorf("%s: no %s listener in %q", where, ctrl, env["KAFKA_LISTENERS"])
		}
		wantVoters = append(wantVoters, fmt.Sprintf("%d@%s:%s", id, name, ctrlPort))
		adv := kafkaListeners(t, where, env["KAFKA_ADVERTISED_LISTENERS"])
		inter := env["KAFKA_INTER_BROKER_LISTENER_NAME"]
		h, p, _ := net.SplitHostPort(adv[inter])
		if _, lp, _ := net.SplitHostPort(listeners[inter]); h != name || p != lp {
			t.Errorf("%s: advertises %s on %q, want %s:%s", where, inter, adv[inter], name, lp)
		}
		kafkaAddrs = append(kafkaAddrs, adv[kafkaClientListener(t, where, env)])
		for ln, addr := range adv {
			if h, p, _ := net.SplitHostPort(addr); h == "localhost" {
				_, lp, _ := net.SplitHostPort(listeners[ln])
				if !slices.Contains(s.Ports, p+":"+lp) {
					t.Errorf("%s: advertises %s to the host but publishes %v", where, addr, s.Ports)
				}
				if other, dup := hostPorts[p]; dup {
					t.Errorf("%s and %s both publish host port %s", name, other, p)
				}
				hostPorts[p] = name
			}
		}
		mounted := false
		for _, v := range s.Volumes {
			if parts := strings.Split(v, ":"); len(parts) >= 2 && strings.HasPrefix(env["KAFKA_LOG_DIRS"], parts[1]) {
				mounted = true
				if other, dup := volumes[parts[0]]; dup {
					t.Errorf("%s and %s share the volume %s", name, other, parts[0])
				}
				volumes[parts[0]] = name
			}
		}
		if !mounted {
			t.Errorf("%s: KAFKA_LOG_DIRS %q is not on a volume (%v)", where, env["KAFKA_LOG_DIRS"], s.Volumes)
		}
	}
	gotVoters := splitList(voters)
	slices.Sort(gotVoters)
	slices.Sort(wantVoters)
	if !slices.Equal(gotVoters, wantVoters) {
		t.Errorf("KAFKA_CONTROLLER_QUORUM_VOTERS %q, want exactly the three brokers' node ids and controller listeners %v", voters, wantVoters)
	}
	if id, err := base64.RawURLEncoding.DecodeString(clusterID); err != nil || len(id) != 16 {
		t.Errorf("CLUSTER_ID %q is not a base64url-encoded 16-byte id (%v)", clusterID, err)
	}
	factor, minISR := env0["KAFKA_DEFAULT_REPLICATION_FACTOR"], env0["KAFKA_MIN_INSYNC_REPLICAS"]
	for k, want := range map[string]string{"KAFKA_DEFAULT_REPLICATION_FACTOR": "3", "KAFKA_MIN_INSYNC_REPLICAS": "2",
		"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "3", "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "3",
		"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "2"} {
		if env0[k] != want {
			t.Errorf("kafka %s %q, want %s", k, env0[k], want)
		}
	}

	// NATS: three nodes routing to each other.
	var natsURLs []string
	for _, name := range natses {
		s := cf.Services[name]
		where := "nats service " + name
		if hc := s.Healthcheck; hc == nil || len(hc.Test) == 0 {
			t.Errorf("%s: no healthcheck", where)
		}
		opts, serverName := natsConfig(t, name, s)
		if serverName != name {
			t.Errorf("%s: server name %q, want %q (unique in the cluster)", where, serverName, name)
		}
		if !opts.JetStream || opts.StoreDir == "" {
			t.Errorf("%s: JetStream %v, store %q", where, opts.JetStream, opts.StoreDir)
		}
		onVolume := false
		for _, v := range s.Volumes {
			if parts := strings.Split(v, ":"); len(parts) >= 2 && !strings.HasPrefix(parts[0], ".") && strings.HasPrefix(opts.StoreDir, parts[1]) {
				onVolume = true
				if other, dup := volumes[parts[0]]; dup {
					t.Errorf("%s and %s share the volume %s", name, other, parts[0])
				}
				volumes[parts[0]] = name
			}
		}
		if !onVolume {
			t.Errorf("%s: JetStream store %s is not on a named volume (%v)", where, opts.StoreDir, s.Volumes)
		}
		if opts.MaxPayload < minNATSPayload {
			t.Errorf("%s: max_payload %d, below the %d-byte audit snapshot", where, opts.MaxPayload, minNATSPayload)
		}
		if opts.Cluster.Name == "" || opts.Cluster.Port == 0 {
			t.Errorf("%s: cluster name %q port %d", where, opts.Cluster.Name, opts.Cluster.Port)
		}
		var routes []string
		for _, r := range opts.Routes {
			if r.Port() != strconv.Itoa(opts.Cluster.Port) {
				t.Errorf("%s: route %s is not on the cluster port %d", where, r, opts.Cluster.Port)
			}
			routes = append(routes, r.Hostname())
		}
		slices.Sort(routes)
		if !slices.Equal(routes, natses) {
			t.Errorf("%s: routes to %v, want %v", where, routes, natses)
		}
		natsURLs = append(natsURLs, fmt.Sprintf("nats://%s:%d", name, opts.Port))
	}
	single, _ := natsConfig(t, "nats", cf.Services["nats"])
	if single.MaxPayload < minNATSPayload || !single.JetStream {
		t.Errorf("nats (default profile): max_payload %d, JetStream %v; want >= %d and JetStream", single.MaxPayload, single.JetStream, minNATSPayload)
	}

	// Switchyard on them.
	cmds := map[string]cli.Command{}
	for _, c := range commands() {
		cmds[c.Name] = c
	}
	creators := map[string]bool{}
	valuesOf := map[string]map[string]string{} // service -> flag values
	for name, s := range cf.Services {
		if s.Build == nil || !s.inProfile("cluster") || len(s.Command) == 0 {
			continue
		}
		c, ok := cmds[s.Command[0]]
		if !ok {
			t.Errorf("service %s: unknown command %q", name, s.Command[0])
			continue
		}
		flags := commandFlags(t, c)
		values := map[string]string{}
		for k, v := range flags {
			values[k] = v
		}
		for env, v := range s.Environment {
			for f := range flags {
				if cli.EnvName(f) == env {
					values[f] = v
				}
			}
		}
		for _, arg := range s.Command[1:] {
			if k, v, ok := strings.Cut(strings.TrimPrefix(arg, "--"), "="); ok {
				values[k] = v
			}
		}
		values[""] = c.Name
		valuesOf[name] = values
		if _, ok := flags["kafka-brokers"]; ok {
			got := splitList(values["kafka-brokers"])
			slices.Sort(got)
			if !slices.Equal(got, kafkaAddrs) {
				t.Errorf("service %s: --kafka-brokers=%q, want the three brokers %v", name, values["kafka-brokers"], kafkaAddrs)
			}
		}
		if _, ok := flags["nats-url"]; ok && c.Name != "agent" && c.Name != "processor" {
			got := splitList(values["nats-url"])
			slices.Sort(got)
			if !slices.Equal(got, natsURLs) {
				t.Errorf("service %s: --nats-url=%q, want the three nodes %v", name, values["nats-url"], natsURLs)
			}
		}
		if _, ok := flags["kafka-replication-factor"]; ok {
			creators[c.Name] = true
			if values["kafka-replication-factor"] != factor || values["kafka-min-insync-replicas"] != minISR {
				t.Errorf("service %s: creates topics with --kafka-replication-factor=%s --kafka-min-insync-replicas=%s, want %s and %s",
					name, values["kafka-replication-factor"], values["kafka-min-insync-replicas"], factor, minISR)
			}
		}
		if _, ok := flags["nats-replicas"]; ok {
			if values["nats-replicas"] != strconv.Itoa(len(natses)) {
				t.Errorf("service %s: --nats-replicas=%s, want %d", name, values["nats-replicas"], len(natses))
			}
		}
	}
	for _, c := range []string{"agent", "processor", "combiner", "optimizer"} {
		if !creators[c] {
			t.Errorf("profile cluster runs no %s that creates topics", c)
		}
	}
	checkComposePartitioned(t, cf, valuesOf)
}

// checkComposePartitioned checks the "cluster" profile's stream
// processing: three `processor --mode partitioned` services, each one
// container with its own --instance-id (a static member: two containers
// under one id would fence each other), and one combiner container, all
// with the same group and window settings.
func checkComposePartitioned(t *testing.T, cf composeFile, valuesOf map[string]map[string]string) {
	t.Helper()
	var procs, combs []string
	for name, v := range valuesOf {
		switch v[""] {
		case "processor":
			procs = append(procs, name)
		case "combiner":
			combs = append(combs, name)
		}
	}
	slices.Sort(procs)
	if len(procs) != 3 || len(combs) != 1 {
		t.Fatalf("profile cluster runs processors %v and combiners %v, want three processors and one combiner", procs, combs)
	}
	comb := valuesOf[combs[0]]
	if n := cf.Services[combs[0]].replicas(); n != 1 {
		t.Errorf("service %s: %d replicas, want one combiner (two would each publish every window)", combs[0], n)
	}
	ids := map[string]string{}
	for _, name := range procs {
		v := valuesOf[name]
		if v["mode"] != "partitioned" {
			t.Errorf("service %s: --mode=%s, want partitioned", name, v["mode"])
		}
		if n := cf.Services[name].replicas(); n != 1 {
			t.Errorf("service %s: %d replicas under one --instance-id", name, n)
		}
		id := v["instance-id"]
		if other, dup := ids[id]; id == "" || dup {
			t.Errorf("service %s: --instance-id=%q, empty or also %s's", name, id, other)
		}
		ids[id] = name
		for _, f := range []string{"group", "window", "slide", "allowed-lateness", "topic-prefix"} {
			if v[f] != comb[f] {
				t.Errorf("service %s: --%s=%q, the combiner %s has %q; they must agree", name, f, v[f], combs[0], comb[f])
			}
		}
	}
}
