package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// operatorSecrets are the Secrets the manifests require and never ship
// (docs/deploy.md#credentials), with the keys the operator puts in them.
var operatorSecrets = map[string][]string{
	"switchyard-agent-credentials":     {"SWITCHYARD_KAFKA_SASL", "SWITCHYARD_KAFKA_USER", "SWITCHYARD_KAFKA_PASSWORD"},
	"switchyard-processor-credentials": {"SWITCHYARD_KAFKA_SASL", "SWITCHYARD_KAFKA_USER", "SWITCHYARD_KAFKA_PASSWORD"},
	"switchyard-optimizer-credentials": {"SWITCHYARD_KAFKA_SASL", "SWITCHYARD_KAFKA_USER", "SWITCHYARD_KAFKA_PASSWORD", "SWITCHYARD_NATS_USER", "SWITCHYARD_NATS_PASSWORD"},
	"switchyard-gateway-credentials":   {"SWITCHYARD_KAFKA_SASL", "SWITCHYARD_KAFKA_USER", "SWITCHYARD_KAFKA_PASSWORD", "SWITCHYARD_NATS_USER", "SWITCHYARD_NATS_PASSWORD"},
	// The reader's (tap, console, replay, explain) and the Kafka super
	// user's: the in-namespace brokers of three-region-ha create their
	// users from them.
	"switchyard-reader-credentials":   {"SWITCHYARD_KAFKA_SASL", "SWITCHYARD_KAFKA_USER", "SWITCHYARD_KAFKA_PASSWORD", "SWITCHYARD_NATS_USER", "SWITCHYARD_NATS_PASSWORD"},
	"switchyard-kafka-admin":          {"SWITCHYARD_KAFKA_ADMIN_PASSWORD"},
	"switchyard-gateway-api-keys":     {"api-keys"},
	"switchyard-snapshot-signing-key": {"snapshot.key"},
	"switchyard-snapshot-public-keys": {"snapshot.key.pub"},
}

// roleOf is the broker role (docs/security.md, services/brokers/roles)
// whose credentials each command runs with.
var roleOf = map[string]string{"agent": "agent", "processor": "processor", "combiner": "processor", "optimizer": "optimizer", "gateway": "gateway"}

// argValue returns the value of --name in args ("" when absent).
func argValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// pinned reports whether image names a version: a tag other than
// latest, or a digest.
func pinned(image string) bool {
	if strings.Contains(image, "@sha256:") {
		return true
	}
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return false
	}
	tag := image[i+1:]
	return tag != "" && tag != "latest"
}

// TestDeploySecureByDefault renders every overlay and checks what
// docs/deploy.md#secure-by-default promises: images pinned; no shipped
// Secret with an empty value; each service's credentials its own role's,
// required; the optimizer signs with a key only it mounts; gateways
// verify with the public key, cache the last snapshot, and serve
// /health and /metrics on an admin port that probes and Prometheus use
// and the Service does not expose; a default-deny NetworkPolicy, the
// gateways' API open and every other port open only to a selected
// source.
func TestDeploySecureByDefault(t *testing.T) {
	for _, overlay := range []string{"one-region", "three-region", "three-region-ha"} {
		t.Run(overlay, func(t *testing.T) {
			r := render(t, filepath.Join("../../deploy/k8s/overlays", overlay))
			for name, s := range r.secrets {
				for k, v := range s.StringData {
					if v == "" {
						t.Errorf("Secret %s ships %s empty", name, k)
					}
				}
				for k, v := range s.Data {
					if len(v) == 0 {
						t.Errorf("Secret %s ships %s empty", name, k)
					}
				}
			}
			all := r.workloads(t)
			if len(all) == 0 {
				t.Fatal("no workloads")
			}
			for _, w := range all {
				checkWorkloadSecure(t, r, w)
			}
			for _, s := range r.stateful { // the brokers of three-region-ha too
				for _, c := range s.Spec.Template.Spec.Containers {
					if !pinned(c.Image) {
						t.Errorf("StatefulSet %s: image %q not pinned", s.Name, c.Image)
					}
				}
			}
			checkNetworkPolicies(t, r)
			checkEngineRegistry(t, r) // registry_deploy_test.go
		})
	}
}

func checkWorkloadSecure(t *testing.T, r rendered, w workload) {
	t.Helper()
	spec := w.template.Spec
	c := spec.Containers[0]
	where := w.String()
	if !pinned(c.Image) {
		t.Errorf("%s: image %q not pinned to a version", where, c.Image)
	}
	cmd := c.Args[0]
	// Credentials: the role's own Secret, required.
	want := "switchyard-" + roleOf[cmd] + "-credentials"
	var creds []string
	for _, from := range c.EnvFrom {
		if from.SecretRef == nil {
			continue
		}
		creds = append(creds, from.SecretRef.Name)
		if from.SecretRef.Optional != nil && *from.SecretRef.Optional {
			t.Errorf("%s: Secret %s is optional", where, from.SecretRef.Name)
		}
	}
	if roleOf[cmd] != "" && !slices.Equal(creds, []string{want}) {
		t.Errorf("%s: credentials from %v, want only %s", where, creds, want)
	}
	for _, e := range c.Env {
		if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil && ref.SecretKeyRef.Optional != nil && *ref.SecretKeyRef.Optional {
			t.Errorf("%s: env %s from an optional Secret", where, e.Name)
		}
	}
	// secretMount returns the mount path of Secret name's volume.
	secretMount := func(name string) (string, bool) {
		for _, v := range spec.Volumes {
			if v.Secret == nil || v.Secret.SecretName != name {
				continue
			}
			for _, m := range c.VolumeMounts {
				if m.Name == v.Name {
					return m.MountPath, true
				}
			}
		}
		return "", false
	}
	keyPath, signs := secretMount("switchyard-snapshot-signing-key")
	switch cmd {
	case "optimizer":
		key := argValue(c.Args, "signing-key")
		if !signs || key != keyPath+"/snapshot.key" {
			t.Errorf("%s: --signing-key=%q, signing key Secret mounted at %q", where, key, keyPath)
		}
	case "gateway":
		pubPath, ok := secretMount("switchyard-snapshot-public-keys")
		if pub := argValue(c.Args, "snapshot-public-keys"); !ok || pub != pubPath+"/snapshot.key.pub" {
			t.Errorf("%s: --snapshot-public-keys=%q, public key Secret mounted at %q", where, pub, pubPath)
		}
		cache := argValue(c.Args, "snapshot-cache")
		writable := false
		for _, m := range c.VolumeMounts {
			if !m.ReadOnly && cache != "" && strings.HasPrefix(cache, m.MountPath+"/") {
				writable = true
			}
		}
		if !writable {
			t.Errorf("%s: --snapshot-cache=%q not on a writable volume", where, cache)
		}
		checkGatewayAdmin(t, r, w, c)
		checkGatewaySpool(t, r, w, c) // spool_deploy_test.go
	}
	if signs && cmd != "optimizer" {
		t.Errorf("%s mounts the signing key", where)
	}
}

// checkGatewayAdmin: /health and /metrics on --admin-listen, another
// port than --listen; the probes and the scrape annotation use it; the
// gateway Services expose only the API.
func checkGatewayAdmin(t *testing.T, r rendered, w workload, c corev1.Container) {
	t.Helper()
	where := w.String()
	admin, api := argValue(c.Args, "admin-listen"), argValue(c.Args, "listen")
	_, adminPort, _ := strings.Cut(admin, ":")
	_, apiPort, _ := strings.Cut(api, ":")
	if admin == "" || adminPort == apiPort {
		t.Fatalf("%s: --admin-listen=%q, --listen=%q", where, admin, api)
	}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s: no %s probe", where, name)
			continue
		}
		if port, ok := portOf(c, p.HTTPGet.Port); !ok || itoa(port) != adminPort {
			t.Errorf("%s: %s probe on port %v, want the admin port %s", where, name, p.HTTPGet.Port.String(), adminPort)
		}
	}
	if got := w.template.Annotations["prometheus.io/port"]; got != adminPort {
		t.Errorf("%s: Prometheus scrapes port %q, want the admin port %s", where, got, adminPort)
	}
	for _, svc := range r.services {
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(w.template.Labels)) || len(svc.Spec.Selector) == 0 {
			continue
		}
		for _, sp := range svc.Spec.Ports {
			if port, ok := portOf(c, sp.TargetPort); !ok || itoa(port) != apiPort {
				t.Errorf("Service %s exposes %s's port %s (want only the API's %s)", svc.Name, where, sp.TargetPort.String(), apiPort)
			}
		}
	}
}

// checkNetworkPolicies: one policy denies all ingress to every pod; for
// each container port of each workload, the policies that select the
// pod and allow the port: the gateway's API port from anywhere, every
// other port from selected sources only (and by some policy).
func checkNetworkPolicies(t *testing.T, r rendered) {
	t.Helper()
	denyAll := false
	for _, np := range r.netpols {
		if len(np.Spec.PodSelector.MatchLabels) == 0 && len(np.Spec.PodSelector.MatchExpressions) == 0 &&
			slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) && len(np.Spec.Ingress) == 0 {
			denyAll = true
		}
	}
	if !denyAll {
		t.Error("no NetworkPolicy denies all ingress by default")
	}
	type pod struct {
		where  string
		labels map[string]string
		ports  []corev1.ContainerPort
		api    string // the gateway's API port
	}
	var pods []pod
	for _, w := range r.workloads(t) {
		c := w.template.Spec.Containers[0]
		p := pod{where: w.String(), labels: w.template.Labels, ports: c.Ports}
		if c.Args[0] == "gateway" {
			_, p.api, _ = strings.Cut(argValue(c.Args, "listen"), ":")
		}
		pods = append(pods, p)
	}
	for _, s := range r.stateful {
		if _, ours := r.workloads(t)[s.Name]; !ours {
			pods = append(pods, pod{where: "StatefulSet " + s.Name, labels: s.Spec.Template.Labels, ports: s.Spec.Template.Spec.Containers[0].Ports})
		}
	}
	for _, p := range pods {
		for _, cp := range p.ports {
			open, selected := false, false
			for _, np := range r.netpols {
				sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
				if err != nil || !sel.Matches(labels.Set(p.labels)) {
					continue
				}
				for _, rule := range np.Spec.Ingress {
					if !allowsPort(rule.Ports, cp) {
						continue
					}
					selected = true
					if len(rule.From) == 0 {
						open = true
					}
				}
			}
			isAPI := p.api != "" && itoa(cp.ContainerPort) == p.api
			switch {
			case isAPI && !open:
				t.Errorf("%s: the API port %d is not open to clients", p.where, cp.ContainerPort)
			case !isAPI && open:
				t.Errorf("%s: port %s (%d) is open to anyone", p.where, cp.Name, cp.ContainerPort)
			case !isAPI && !selected:
				t.Errorf("%s: port %s (%d) allowed by no NetworkPolicy (unreachable, also to Prometheus)", p.where, cp.Name, cp.ContainerPort)
			}
		}
	}
}

func allowsPort(ports []networkingv1.NetworkPolicyPort, cp corev1.ContainerPort) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		if p.Port == nil || (p.Port.IntValue() == int(cp.ContainerPort)) || (p.Port.String() == cp.Name && cp.Name != "") {
			return true
		}
	}
	return false
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

// TestComposeSecureByDefault: in docker-compose.yml, every image is
// pinned; a keygen step writes the signing key once; every optimizer
// signs with it from a volume only keygen and the optimizers mount;
// every gateway verifies with the public key (read-only), caches the
// last snapshot, and serves /health and /metrics on an admin port that
// is not published while Prometheus scrapes it.
func TestComposeSecureByDefault(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	volumeOf := func(s composeService, path string) (vol string, ro bool) {
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && strings.HasPrefix(path, parts[1]+"/") {
				return parts[0], len(parts) == 3 && parts[2] == "ro"
			}
		}
		return "", false
	}
	kg, ok := f.Services["keygen"]
	if !ok || len(kg.Command) == 0 || kg.Command[0] != "keygen" {
		t.Fatal("no keygen service")
	}
	keyFile, pubFile := argValue(kg.Command, "out"), argValue(kg.Command, "public-out")
	keyVol, _ := volumeOf(kg, keyFile)
	pubVol, _ := volumeOf(kg, pubFile)
	if keyVol == "" || pubVol == "" || keyVol == pubVol || !slices.Contains(kg.Command, "--keep-existing") {
		t.Fatalf("keygen %v: key on volume %q, public key on %q", kg.Command, keyVol, pubVol)
	}
	prom, err := os.ReadFile("../../deploy/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	optimizers, gateways := 0, 0
	for name, s := range f.Services {
		if !pinned(s.Image) {
			t.Errorf("%s: image %q not pinned to a version", name, s.Image)
		}
		if len(s.Command) == 0 {
			continue
		}
		if v, _ := volumeOf(s, keyFile); v == keyVol && name != "keygen" && s.Command[0] != "optimizer" {
			t.Errorf("%s mounts the signing key's volume", name)
		}
		switch s.Command[0] {
		case "optimizer":
			optimizers++
			if key := argValue(s.Command, "signing-key"); key != keyFile {
				t.Errorf("%s: --signing-key=%q, want %s", name, key, keyFile)
			}
			if v, ro := volumeOf(s, keyFile); v != keyVol || !ro {
				t.Errorf("%s: signing key volume %q (read-only %v), want %s read-only", name, v, ro, keyVol)
			}
		case "gateway":
			gateways++
			if pub := argValue(s.Command, "snapshot-public-keys"); pub != pubFile {
				t.Errorf("%s: --snapshot-public-keys=%q, want %s", name, pub, pubFile)
			}
			if v, ro := volumeOf(s, pubFile); v != pubVol || !ro {
				t.Errorf("%s: public key volume %q (read-only %v), want %s read-only", name, v, ro, pubVol)
			}
			if argValue(s.Command, "snapshot-cache") == "" {
				t.Errorf("%s: no --snapshot-cache", name)
			}
			_, admin, _ := strings.Cut(argValue(s.Command, "admin-listen"), ":")
			_, api, _ := strings.Cut(argValue(s.Command, "listen"), ":")
			if admin == "" || admin == api {
				t.Errorf("%s: admin port %q, API port %q", name, admin, api)
			}
			for _, p := range s.Ports {
				if strings.HasSuffix(p, ":"+admin) {
					t.Errorf("%s publishes the admin port: %s", name, p)
				}
			}
			if !slices.Contains(s.Expose, admin) {
				t.Errorf("%s: admin port %s not exposed on the compose network", name, admin)
			}
			if !s.inProfile("cluster") && !strings.Contains(string(prom), name+":"+admin) {
				t.Errorf("Prometheus does not scrape %s's admin port %s", name, admin)
			}
			if strings.Contains(string(prom), name+":"+api) {
				t.Errorf("Prometheus scrapes %s's API port %s", name, api)
			}
		}
		if roleOf[s.Command[0]] != "" || s.Command[0] == "optimizer" {
			deps, _ := s.DependsOn.(map[string]any)
			if dep, _ := deps["keygen"].(map[string]any); dep["condition"] != "service_completed_successfully" {
				t.Errorf("%s does not wait for keygen: %v", name, s.DependsOn)
			}
		}
	}
	if optimizers == 0 || gateways == 0 {
		t.Fatalf("%d optimizers, %d gateways", optimizers, gateways)
	}
	checkComposeEngineRegistry(t, f) // registry_deploy_test.go
	checkComposeSpool(t, f)          // spool_deploy_test.go
}
