package main

import (
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// statefulEnv returns a StatefulSet container's literal variables, with
// $(VAR) references to variables defined before them expanded
// (Kubernetes' rule), and the field path of each downward-API variable.
func statefulEnv(t *testing.T, where string, c corev1.Container) (env, fields map[string]string) {
	t.Helper()
	env, fields = map[string]string{}, map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			v := e.Value
			for k, kv := range env {
				v = strings.ReplaceAll(v, "$("+k+")", kv)
			}
			if strings.Contains(v, "$(") {
				t.Errorf("%s: %s=%q refers to a variable not defined before it", where, e.Name, e.Value)
			}
			env[e.Name] = v
		case e.ValueFrom.FieldRef != nil:
			fields[e.Name] = e.ValueFrom.FieldRef.FieldPath
			env[e.Name] = "{" + e.ValueFrom.FieldRef.FieldPath + "}"
		case e.ValueFrom.SecretKeyRef != nil:
			// A password: "<secret NAME>" for the variable NAME.
			env[e.Name] = "<secret " + e.Name + ">"
		default:
			t.Errorf("%s: %s: unsupported source", where, e.Name)
		}
	}
	return env, fields
}

// headlessFor returns the headless Service ss names, checking it selects
// ss's pods and publishes them before they are ready (the quorum forms
// only when they find each other).
func headlessFor(t *testing.T, r rendered, ss *appsv1.StatefulSet) *corev1.Service {
	t.Helper()
	svc, ok := r.services[ss.Spec.ServiceName]
	if !ok {
		t.Fatalf("StatefulSet %s: serviceName %q is no Service", ss.Name, ss.Spec.ServiceName)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses ||
		!labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(ss.Spec.Template.Labels)) {
		t.Errorf("StatefulSet %s: Service %s must be headless, publish not-ready pods and select them", ss.Name, svc.Name)
	}
	return svc
}

// onClaim reports whether dir is on one of ss's volume claim templates.
func onClaim(ss *appsv1.StatefulSet, c corev1.Container, dir string) bool {
	for _, m := range c.VolumeMounts {
		for _, vct := range ss.Spec.VolumeClaimTemplates {
			if m.Name == vct.Name && (dir == m.MountPath || strings.HasPrefix(dir, m.MountPath+"/")) {
				return true
			}
		}
	}
	return false
}

// checkClusteredBrokers checks an overlay that runs the brokers itself:
// three Kafka pods forming one KRaft quorum (each pod's node id its pod
// index, the voters exactly the three pods' controller listeners under the
// headless Service), replication factor 3 and min.insync.replicas 2; three
// NATS pods whose configuration (from its ConfigMap, parsed by
// nats-server) routes to all three, JetStream on a claim and max_payload
// over the 12 MB audit snapshot; one PodDisruptionBudget each allowing
// one pod down; and the Switchyard commands pointed at them, creating
// topics and the snapshot store with those replications.
func checkClusteredBrokers(t *testing.T, r rendered, valuesOf map[string]map[string]string) {
	var kafka, nats *appsv1.StatefulSet
	for _, ss := range r.stateful {
		switch img := ss.Spec.Template.Spec.Containers[0].Image; {
		case strings.HasPrefix(img, switchyardImage): // TestKustomize checks it
		case strings.HasPrefix(img, "apache/kafka:"):
			kafka = ss
		case strings.HasPrefix(img, "nats:"):
			nats = ss
		default:
			t.Errorf("StatefulSet %s runs %s", ss.Name, img)
		}
	}
	if kafka == nil || nats == nil {
		t.Fatalf("StatefulSets %v: want a Kafka and a NATS one", r.stateful)
	}
	for _, ss := range []*appsv1.StatefulSet{kafka, nats} {
		if ss.Spec.Replicas == nil || *ss.Spec.Replicas != 3 {
			t.Errorf("StatefulSet %s: replicas %v, want 3", ss.Name, ss.Spec.Replicas)
		}
		n := 0
		for _, p := range r.pdbs {
			sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
			if err != nil {
				t.Fatal(err)
			}
			if sel.Matches(labels.Set(ss.Spec.Template.Labels)) {
				n++
				if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() != 1 {
					t.Errorf("PDB %s: maxUnavailable %v, want 1 (a quorum of 2 of 3 stays)", p.Name, p.Spec.MaxUnavailable)
				}
			}
		}
		if n != 1 {
			t.Errorf("StatefulSet %s: %d PodDisruptionBudgets, want 1", ss.Name, n)
		}
	}
	ns := kafka.Namespace

	// Kafka.
	kc := kafka.Spec.Template.Spec.Containers[0]
	where := "StatefulSet " + kafka.Name
	env, fields := statefulEnv(t, where, kc)
	if fields["POD_NAME"] != "metadata.name" || fields["POD_NAMESPACE"] != "metadata.namespace" {
		t.Errorf("%s: POD_NAME and POD_NAMESPACE from %v", where, fields)
	}
	if fields["KAFKA_NODE_ID"] != "metadata.labels['apps.kubernetes.io/pod-index']" {
		t.Errorf("%s: KAFKA_NODE_ID from %q, want the pod index", where, fields["KAFKA_NODE_ID"])
	}
	roles := splitList(env["KAFKA_PROCESS_ROLES"])
	if !slices.Contains(roles, "broker") || !slices.Contains(roles, "controller") {
		t.Errorf("%s: roles %v", where, roles)
	}
	svc := headlessFor(t, r, kafka)
	listeners := kafkaListeners(t, where, env["KAFKA_LISTENERS"])
	_, ctrlPort, _ := net.SplitHostPort(listeners[env["KAFKA_CONTROLLER_LISTENER_NAMES"]])
	inter := kafkaClientListener(t, where, env) // the one Switchyard uses
	_, brokerPort, _ := net.SplitHostPort(listeners[inter])
	for _, p := range []string{ctrlPort, brokerPort} {
		n, _ := strconv.Atoi(p)
		if !slices.ContainsFunc(kc.Ports, func(cp corev1.ContainerPort) bool { return int(cp.ContainerPort) == n }) {
			t.Errorf("%s: listener port %s is no container port", where, p)
		}
	}
	pod := func(ss *appsv1.StatefulSet, i int, svc string) string {
		return fmt.Sprintf("%s-%d.%s", ss.Name, i, svc)
	}
	var wantVoters, wantBrokers []string
	for i := range 3 {
		wantVoters = append(wantVoters, fmt.Sprintf("%d@%s.%s.svc:%s", i, pod(kafka, i, svc.Name), ns, ctrlPort))
		wantBrokers = append(wantBrokers, fmt.Sprintf("%s.%s.svc:%s", pod(kafka, i, svc.Name), ns, brokerPort))
	}
	voters := strings.ReplaceAll(env["KAFKA_CONTROLLER_QUORUM_VOTERS"], "{metadata.namespace}", ns)
	if got := splitList(voters); !slices.Equal(got, wantVoters) {
		t.Errorf("%s: voters %v, want %v", where, got, wantVoters)
	}
	adv := kafkaListeners(t, where, env["KAFKA_ADVERTISED_LISTENERS"])
	if want := fmt.Sprintf("{metadata.name}.%s.{metadata.namespace}.svc:%s", svc.Name, brokerPort); adv[inter] != want {
		t.Errorf("%s: advertises %s on %q, want %q", where, inter, adv[inter], want)
	}
	for k, want := range map[string]string{"KAFKA_DEFAULT_REPLICATION_FACTOR": "3", "KAFKA_MIN_INSYNC_REPLICAS": "2",
		"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "3", "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "3",
		"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "2", "KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE": "false"} {
		if env[k] != want {
			t.Errorf("%s: %s %q, want %s", where, k, env[k], want)
		}
	}
	if !onClaim(kafka, kc, env["KAFKA_LOG_DIRS"]) {
		t.Errorf("%s: KAFKA_LOG_DIRS %q is not on a volume claim", where, env["KAFKA_LOG_DIRS"])
	}

	// NATS.
	nc := nats.Spec.Template.Spec.Containers[0]
	where = "StatefulSet " + nats.Name
	_, nfields := statefulEnv(t, where, nc)
	var conf, serverName string
	for i := 0; i+1 < len(nc.Args); i++ {
		switch nc.Args[i] {
		case "-c", "--config":
			conf = nc.Args[i+1]
		case "-n", "--name", "--server_name":
			serverName = nc.Args[i+1]
		}
	}
	if serverName != "$(POD_NAME)" || nfields["POD_NAME"] != "metadata.name" {
		t.Errorf("%s: server name %q (POD_NAME from %q), want each pod's name", where, serverName, nfields["POD_NAME"])
	}
	var data string
	for _, m := range nc.VolumeMounts {
		if m.MountPath != path.Dir(conf) {
			continue
		}
		for _, v := range nats.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				cm, ok := r.configMaps[v.ConfigMap.Name]
				if !ok {
					t.Fatalf("%s: ConfigMap %s does not exist", where, v.ConfigMap.Name)
				}
				data = cm.Data[path.Base(conf)]
			}
		}
	}
	if data == "" {
		t.Fatalf("%s: configuration %q is in no mounted ConfigMap", where, conf)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	// The files it includes, from the same ConfigMap, and the role
	// passwords they read from the environment.
	for _, cm := range r.configMaps {
		if cm.Data[path.Base(conf)] != data {
			continue
		}
		for f, d := range cm.Data {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(d), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	setPasswordEnv(t)
	opts, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatalf("%s: %s: %v", where, conf, err)
	}
	if !opts.JetStream || !onClaim(nats, nc, opts.StoreDir) {
		t.Errorf("%s: JetStream %v, store %q not on a volume claim", where, opts.JetStream, opts.StoreDir)
	}
	if opts.MaxPayload < minNATSPayload {
		t.Errorf("%s: max_payload %d, below the %d-byte audit snapshot", where, opts.MaxPayload, minNATSPayload)
	}
	nsvc := headlessFor(t, r, nats)
	var routes, wantRoutes []string
	for _, u := range opts.Routes {
		routes = append(routes, u.Host)
	}
	for i := range 3 {
		wantRoutes = append(wantRoutes, fmt.Sprintf("%s:%d", pod(nats, i, nsvc.Name), opts.Cluster.Port))
	}
	if opts.Cluster.Name == "" || !slices.Equal(routes, wantRoutes) {
		t.Errorf("%s: cluster %q routes %v, want %v", where, opts.Cluster.Name, routes, wantRoutes)
	}
	for port, name := range map[int]string{opts.Port: "client", opts.Cluster.Port: "cluster", opts.HTTPPort: "monitor"} {
		if got, ok := portOf(nc, intstr.FromString(name)); !ok || int(got) != port {
			t.Errorf("%s: container port %s is %d, the configuration says %d", where, name, got, port)
		}
	}

	// Switchyard on them.
	creators := 0
	for name, values := range valuesOf {
		if _, ok := values["kafka-brokers"]; ok {
			if got := splitList(values["kafka-brokers"]); !slices.Equal(got, wantBrokers) {
				t.Errorf("%s: --kafka-brokers %v, want the three brokers %v", name, got, wantBrokers)
			}
		}
		if u, ok := values["nats-url"]; ok && values[""] != "agent" && values[""] != "processor" {
			found := false
			for _, s := range r.services {
				if labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(nats.Spec.Template.Labels)) {
					for _, p := range s.Spec.Ports {
						if tp, ok := portOf(nc, p.TargetPort); ok && int(tp) == opts.Port && u == fmt.Sprintf("nats://%s.%s.svc:%d", s.Name, ns, p.Port) {
							found = true
						}
					}
				}
			}
			if !found {
				t.Errorf("%s: --nats-url %q is no Service of the NATS pods' client port", name, u)
			}
		}
		if _, ok := values["kafka-replication-factor"]; ok {
			creators++
			if values["kafka-replication-factor"] != env["KAFKA_DEFAULT_REPLICATION_FACTOR"] || values["kafka-min-insync-replicas"] != env["KAFKA_MIN_INSYNC_REPLICAS"] {
				t.Errorf("%s creates topics with factor %s, min.insync.replicas %s; the brokers say %s and %s", name,
					values["kafka-replication-factor"], values["kafka-min-insync-replicas"], env["KAFKA_DEFAULT_REPLICATION_FACTOR"], env["KAFKA_MIN_INSYNC_REPLICAS"])
			}
		}
		if _, ok := values["nats-replicas"]; ok && values["nats-replicas"] != strconv.Itoa(int(*nats.Spec.Replicas)) {
			t.Errorf("%s: --nats-replicas %s, want %d", name, values["nats-replicas"], *nats.Spec.Replicas)
		}
	}
	if creators != 6 { // three agents, the processor instances, the combiner, the optimizer
		t.Errorf("%d workloads create topics, want 6", creators)
	}
}
