package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"gopkg.in/yaml.v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/switchyard-llm/switchyard/services/brokers/roles"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/process"
)

var updateBrokerConfigs = flag.Bool("update-broker-configs", false, "rewrite the generated broker configurations under deploy/")

// generatedBrokerConfigs are the files under deploy/ rendered from
// services/brokers/roles, so that the real brokers' users, permissions and
// ACLs cannot drift from the roles the embedded brokers and
// TestLeastPrivilege use. The three-region-ha overlay holds copies of
// docker-compose's because kustomize (kubectl apply -k) loads a
// configMapGenerator's files only from the kustomization's directory: a
// path or a symlink out of it is refused ("security; file ... is not in or
// below ..."); this test keeps each copy equal to the one rendering.
func generatedBrokerConfigs(t *testing.T) map[string]string {
	t.Helper()
	script, err := roles.KafkaSetupScript(streams.DefaultPrefix, process.DefaultGroup, 3)
	if err != nil {
		t.Fatal(err)
	}
	auth := roles.NATSAuthorization()
	return map[string]string{
		"../../deploy/nats/auth.conf":                              auth,
		"../../deploy/kafka/setup.sh":                              script,
		"../../deploy/k8s/overlays/three-region-ha/auth.conf":      auth,
		"../../deploy/k8s/overlays/three-region-ha/kafka-setup.sh": script,
	}
}

// TestBrokerConfigsGenerated: the NATS authorization blocks and Kafka
// setup scripts under deploy/ are what services/brokers/roles renders
// (-update-broker-configs rewrites them).
func TestBrokerConfigsGenerated(t *testing.T) {
	for file, want := range generatedBrokerConfigs(t) {
		if *updateBrokerConfigs {
			if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s differs from what services/brokers/roles renders; run go test ./services/switchyard -run TestBrokerConfigsGenerated -update-broker-configs", file)
		}
	}
}

// kafkaProps turns the apache/kafka image's KAFKA_* variables into the
// server properties it writes (. is _, _ is __, - is ___).
func kafkaProps(env map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		name, ok := strings.CutPrefix(k, "KAFKA_")
		if !ok {
			continue
		}
		name = strings.ReplaceAll(name, "___", "\x00")
		name = strings.ReplaceAll(name, "__", "\x01")
		name = strings.ReplaceAll(name, "_", ".")
		name = strings.ReplaceAll(name, "\x00", "-")
		name = strings.ReplaceAll(name, "\x01", "_")
		out[strings.ToLower(name)] = v
	}
	return out
}

// kafkaClientListener is the listener the Switchyard services use: the
// one advertised that is neither the inter-broker listener nor advertised
// on localhost (for clients on the host).
func kafkaClientListener(t *testing.T, where string, env map[string]string) string {
	t.Helper()
	var out []string
	for name, addr := range kafkaListeners(t, where, env["KAFKA_ADVERTISED_LISTENERS"]) {
		if h, _, _ := net.SplitHostPort(addr); name != env["KAFKA_INTER_BROKER_LISTENER_NAME"] && h != "localhost" && h != "127.0.0.1" {
			out = append(out, name)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%s: client listeners %v, want one", where, out)
	}
	return out[0]
}

var (
	jaasPassword = regexp.MustCompile(`\b(password|user_[A-Za-z0-9_-]+)="([^"]*)"`)
	jaasUsername = regexp.MustCompile(`\busername="([^"]*)"`)
)

// checkKafkaAuth checks one broker's configuration: every listener SASL
// (the controller's too); the clients' listeners take only SCRAM
// (roles.KafkaMechanism); PLAIN only on the inter-broker and controller
// listeners, for the super user alone, its password from isRef's
// variable; the StandardAuthorizer, deny without an ACL, and no topic
// created by a client (the setup creates them).
func checkKafkaAuth(t *testing.T, where string, env map[string]string, isRef func(value, variable string) bool) {
	t.Helper()
	p := kafkaProps(env)
	protocols := map[string]string{}
	for _, m := range splitList(p["listener.security.protocol.map"]) {
		name, proto, _ := strings.Cut(m, ":")
		protocols[name] = proto
	}
	internal := map[string]bool{p["inter.broker.listener.name"]: true, p["controller.listener.names"]: true}
	for name := range kafkaListeners(t, where, p["listeners"]) {
		if proto := protocols[name]; proto != "SASL_PLAINTEXT" && proto != "SASL_SSL" {
			t.Errorf("%s: listener %s is %q: a client without credentials gets in", where, name, proto)
			continue
		}
		lname := strings.ToLower(name)
		mechs := splitList(p["listener.name."+lname+".sasl.enabled.mechanisms"])
		want := []string{roles.KafkaMechanism}
		if internal[name] {
			want = []string{"PLAIN"}
		}
		if !slices.Equal(mechs, want) {
			t.Errorf("%s: listener %s takes %v, want %v", where, name, mechs, want)
		}
		for _, m := range mechs {
			jaas := p["listener.name."+lname+"."+strings.ToLower(m)+".sasl.jaas.config"]
			if jaas == "" {
				t.Errorf("%s: listener %s: no JAAS configuration for %s", where, name, m)
				continue
			}
			if m != "PLAIN" {
				if jaasPassword.MatchString(jaas) {
					t.Errorf("%s: listener %s: SCRAM JAAS holds a password: %q", where, name, jaas)
				}
				continue
			}
			if u := jaasUsername.FindStringSubmatch(jaas); u == nil || u[1] != roles.KafkaAdmin {
				t.Errorf("%s: listener %s: PLAIN logs in as %v, want %s", where, name, u, roles.KafkaAdmin)
			}
			users := 0
			for _, kv := range jaasPassword.FindAllStringSubmatch(jaas, -1) {
				if kv[1] != "password" {
					users++
					if kv[1] != "user_"+roles.KafkaAdmin {
						t.Errorf("%s: listener %s: PLAIN user %s besides %s", where, name, kv[1], roles.KafkaAdmin)
					}
				}
				if !isRef(kv[2], roles.AdminPasswordEnv) {
					t.Errorf("%s: listener %s: %s=%q is not the variable %s", where, name, kv[1], kv[2], roles.AdminPasswordEnv)
				}
			}
			if users != 1 {
				t.Errorf("%s: listener %s: %d PLAIN users, want %s alone", where, name, users, roles.KafkaAdmin)
			}
		}
	}
	for k, want := range map[string]string{
		"authorizer.class.name":                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
		"allow.everyone.if.no.acl.found":       "false",
		"super.users":                          "User:" + roles.KafkaAdmin,
		"sasl.mechanism.inter.broker.protocol": "PLAIN",
		"sasl.mechanism.controller.protocol":   "PLAIN",
		"auto.create.topics.enable":            "false",
	} {
		if p[k] != want {
			t.Errorf("%s: %s=%q, want %q", where, k, p[k], want)
		}
	}
}

// setupScript is the parsed Kafka setup script: its topics, the users it
// gives a SCRAM password (user -> the variable), and its ACLs as
// "principal resource-option name operation" lines.
type setupScript struct {
	topics []string
	users  map[string]string
	acls   []string
}

func parseSetupScript(t *testing.T, text string) setupScript {
	t.Helper()
	s := setupScript{users: map[string]string{}}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "topic":
			s.topics = append(s.topics, f[1])
		case "user":
			s.users[f[1]] = strings.Trim(f[2], `"$`)
		case "acl":
			res := f[len(f)-2:]
			for i := 2; i < len(f)-2; i += 2 {
				if f[i] != "--operation" {
					t.Fatalf("acl line %q", line)
				}
				s.acls = append(s.acls, strings.Join([]string{f[1], res[0], res[1], strings.ToUpper(f[i+1])}, " "))
			}
		}
	}
	return s
}

// checkSetupScript: the script creates every topic, a user for every
// role with the password of its variable, and exactly the roles' ACLs.
func checkSetupScript(t *testing.T, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s := parseSetupScript(t, string(b))
	var wantTopics []string
	for _, tp := range roles.Topics(streams.DefaultPrefix, 3) {
		wantTopics = append(wantTopics, tp.Name)
	}
	if !slices.Equal(s.topics, wantTopics) {
		t.Errorf("%s creates topics %v, want %v", file, s.topics, wantTopics)
	}
	res := map[string]string{"TOPIC": "--topic", "GROUP": "--group"}
	var want []string
	for _, r := range roles.Roles() {
		if s.users[string(r)] != r.PasswordEnv() {
			t.Errorf("%s: user %s's password from %q, want $%s", file, r, s.users[string(r)], r.PasswordEnv())
		}
		for _, a := range r.Kafka().ACLs(streams.DefaultPrefix, process.DefaultGroup) {
			want = append(want, strings.Join([]string{string(r), res[a.Resource.String()], a.Name, a.Operation.String()}, " "))
		}
	}
	if len(s.users) != len(roles.Roles()) {
		t.Errorf("%s: users %v, want one per role", file, s.users)
	}
	slices.Sort(want)
	got := slices.Sorted(slices.Values(s.acls))
	if !slices.Equal(got, want) {
		t.Errorf("%s: ACLs\n%s\nwant (services/brokers/roles)\n%s", file, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// setPasswordEnv sets every role's password variable to a marker and
// returns variable -> marker, for parsing NATS configurations.
func setPasswordEnv(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, r := range roles.Roles() {
		out[r.PasswordEnv()] = "from-env-" + r.PasswordEnv()
		t.Setenv(r.PasswordEnv(), out[r.PasswordEnv()])
	}
	return out
}

// checkNATSAuth: no anonymous access (no no_auth_user, token or
// single user), exactly one user per role that uses NATS, its password
// the role's variable and its permissions exactly the role's.
func checkNATSAuth(t *testing.T, where string, opts *server.Options, marker map[string]string) {
	t.Helper()
	if opts.NoAuthUser != "" || opts.Authorization != "" || opts.Username != "" || len(opts.Nkeys) > 0 {
		t.Errorf("%s: no_auth_user %q, token set %v, single user %q, %d nkeys: want the role users only",
			where, opts.NoAuthUser, opts.Authorization != "", opts.Username, len(opts.Nkeys))
	}
	got := map[string]*server.User{}
	for _, u := range opts.Users {
		got[u.Username] = u
	}
	want := 0
	for _, r := range roles.Roles() {
		if r.NATS() == roles.NATSNone {
			if _, ok := got[string(r)]; ok {
				t.Errorf("%s: user %s, whose role uses no NATS", where, r)
			}
			continue
		}
		want++
		u, ok := got[string(r)]
		if !ok {
			t.Errorf("%s: no user %s", where, r)
			continue
		}
		if u.Password != marker[r.PasswordEnv()] {
			t.Errorf("%s: user %s's password is not $%s", where, r, r.PasswordEnv())
		}
		if g, w := permString(u.Permissions), permString(r.NATS().Permissions()); g != w {
			t.Errorf("%s: user %s may\n%s\nwant (services/brokers/roles)\n%s", where, r, g, w)
		}
	}
	if len(got) != want {
		t.Errorf("%s: %d users, want %d", where, len(got), want)
	}
}

// permString renders p's subjects sorted, for comparing.
func permString(p *server.Permissions) string {
	if p == nil {
		return "<all>"
	}
	list := func(name string, sp *server.SubjectPermission) string {
		if sp == nil {
			return name + ": <all>"
		}
		return fmt.Sprintf("%s allow %v deny %v", name, slices.Sorted(slices.Values(sp.Allow)), slices.Sorted(slices.Values(sp.Deny)))
	}
	return list("publish", p.Publish) + "\n" + list("subscribe", p.Subscribe)
}

var composeRef = regexp.MustCompile(`^\$\{([A-Z0-9_]+):\?[^}]*\}$`)

// composeIsRef reports whether a compose value is the required variable
// (${NAME:?message}: compose refuses to start without it).
func composeIsRef(value, variable string) bool {
	m := composeRef.FindStringSubmatch(value)
	return m != nil && m[1] == variable
}

// TestComposeBrokersAuthenticated: in docker-compose.yml (both
// profiles) no broker takes a client without credentials. Every Kafka
// broker passes checkKafkaAuth with the admin password from the required
// variable; a kafka-setup service per Kafka cluster runs
// deploy/kafka/setup.sh (checkSetupScript: every role's user and exactly
// its ACLs) with every password from its variable, after the brokers are
// healthy and before any Switchyard service starts; every NATS
// configuration, parsed by nats-server with the passwords in its
// environment, has exactly the role users with the roles' permissions;
// and every Switchyard service connects as its role, SCRAM to Kafka,
// user and password to NATS, the passwords from the variables.
func TestComposeBrokersAuthenticated(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(b, &cf); err != nil {
		t.Fatal(err)
	}
	checkSetupScript(t, "../../deploy/kafka/setup.sh")
	marker := setPasswordEnv(t)
	setups := map[string]string{} // a Kafka broker -> its setup service
	kafkas, natses := 0, 0
	for name, s := range cf.Services {
		where := "service " + name
		switch {
		case strings.HasPrefix(s.Image, "apache/kafka:") && len(s.Command) == 0:
			kafkas++
			checkKafkaAuth(t, where, s.Environment, composeIsRef)
		case strings.HasPrefix(s.Image, "apache/kafka:"):
			script := ""
			for _, v := range s.Volumes {
				if parts := strings.Split(v, ":"); len(parts) == 3 && parts[0] == "./deploy/kafka/setup.sh" && parts[2] == "ro" && slices.Contains(s.Command, parts[1]) {
					script = parts[1]
				}
			}
			if script == "" {
				t.Errorf("%s: command %v runs no read-only ./deploy/kafka/setup.sh", where, s.Command)
			}
			for _, v := range append([]string{roles.AdminPasswordEnv}, rolePasswordVars()...) {
				if !composeIsRef(s.Environment[v], v) {
					t.Errorf("%s: %s=%q, want the required variable ${%s:?...}", where, v, s.Environment[v], v)
				}
			}
			deps, _ := s.DependsOn.(map[string]any)
			for _, br := range splitList(s.Environment["KAFKA_BOOTSTRAP"]) {
				host, port, _ := net.SplitHostPort(br)
				k, ok := cf.Services[host]
				if !ok {
					t.Errorf("%s: KAFKA_BOOTSTRAP %s is no service", where, br)
					continue
				}
				env := k.Environment
				inter := env["KAFKA_INTER_BROKER_LISTENER_NAME"]
				if _, p, _ := net.SplitHostPort(kafkaListeners(t, host, env["KAFKA_LISTENERS"])[inter]); p != port {
					t.Errorf("%s: KAFKA_BOOTSTRAP %s is not %s's admin listener %s", where, br, host, inter)
				}
				if d, _ := deps[host].(map[string]any); d["condition"] != "service_healthy" {
					t.Errorf("%s: does not wait for %s to be healthy", where, host)
				}
				setups[host] = name
			}
		case strings.HasPrefix(s.Image, "nats:"):
			natses++
			opts, _ := natsConfig(t, name, s)
			checkNATSAuth(t, where, opts, marker)
			checkComposeIncludes(t, where, s)
			for _, r := range roles.Roles() {
				if v := r.PasswordEnv(); r.NATS() != roles.NATSNone && !composeIsRef(s.Environment[v], v) {
					t.Errorf("%s: %s=%q, want the required variable ${%s:?...}", where, v, s.Environment[v], v)
				}
			}
		}
	}
	if kafkas == 0 || natses == 0 {
		t.Fatalf("%d Kafka brokers, %d NATS servers", kafkas, natses)
	}
	for name, s := range cf.Services {
		if s.Build == nil || len(s.Command) == 0 || roleOf[s.Command[0]] == "" {
			continue
		}
		checkComposeCredentials(t, cf, name, s, setups)
	}
}

// rolePasswordVars are the roles' password variables.
func rolePasswordVars() []string {
	var out []string
	for _, r := range roles.Roles() {
		out = append(out, r.PasswordEnv())
	}
	return out
}

// checkComposeCredentials: a Switchyard service connects to Kafka with
// SCRAM as its role, to NATS (when it uses it) as its role, passwords
// from the role's variable, and starts after its Kafka's setup.
func checkComposeCredentials(t *testing.T, cf composeFile, name string, s composeService, setups map[string]string) {
	t.Helper()
	role := roles.Role(roleOf[s.Command[0]])
	env := s.Environment
	where := "service " + name
	want := map[string]string{"SWITCHYARD_KAFKA_SASL": roles.KafkaMechanism, "SWITCHYARD_KAFKA_USER": string(role)}
	if env["SWITCHYARD_NATS_URL"] != "" {
		if role.NATS() == roles.NATSNone {
			t.Errorf("%s uses NATS, which its role %s may not", where, role)
		}
		want["SWITCHYARD_NATS_USER"] = string(role)
		if !composeIsRef(env["SWITCHYARD_NATS_PASSWORD"], role.PasswordEnv()) {
			t.Errorf("%s: SWITCHYARD_NATS_PASSWORD=%q, want ${%s:?...}", where, env["SWITCHYARD_NATS_PASSWORD"], role.PasswordEnv())
		}
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s: %s=%q, want %q", where, k, env[k], v)
		}
	}
	if !composeIsRef(env["SWITCHYARD_KAFKA_PASSWORD"], role.PasswordEnv()) {
		t.Errorf("%s: SWITCHYARD_KAFKA_PASSWORD=%q, want ${%s:?...}", where, env["SWITCHYARD_KAFKA_PASSWORD"], role.PasswordEnv())
	}
	deps, _ := s.DependsOn.(map[string]any)
	for _, br := range splitList(env["SWITCHYARD_KAFKA_BROKERS"]) {
		host, _, _ := net.SplitHostPort(br)
		setup, ok := setups[host]
		if !ok {
			t.Errorf("%s: no setup service creates the users on %s", where, host)
			continue
		}
		if d, _ := deps[setup].(map[string]any); d["condition"] != "service_completed_successfully" {
			t.Errorf("%s: does not wait for %s to complete", where, setup)
		}
	}
}

// TestDeployBrokersAuthenticated: three-region-ha's in-namespace brokers
// take no client without credentials. Kafka passes checkKafkaAuth with
// the admin password from the Secret switchyard-kafka-admin; the Job
// kafka-setup runs the generated script (checkSetupScript) from its
// ConfigMap with every role's password from the role's credentials
// Secret; NATS's configuration, parsed by nats-server, has exactly the
// role users with the roles' permissions, each password from its role's
// Secret.
func TestDeployBrokersAuthenticated(t *testing.T) {
	r := render(t, "../../deploy/k8s/overlays/three-region-ha")
	checkSetupScript(t, "../../deploy/k8s/overlays/three-region-ha/kafka-setup.sh")
	secretOf := func(c corev1.Container) map[string]string { // variable -> Secret/key
		out := map[string]string{}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				ref := e.ValueFrom.SecretKeyRef
				if ref.Optional != nil && *ref.Optional {
					t.Errorf("env %s from an optional Secret", e.Name)
				}
				out[e.Name] = ref.Name + "/" + ref.Key
			}
		}
		return out
	}
	const admin = "switchyard-kafka-admin/" + roles.AdminPasswordEnv
	var kafka, nats *corev1.Container
	for _, ss := range r.stateful {
		c := ss.Spec.Template.Spec.Containers[0]
		switch {
		case strings.HasPrefix(c.Image, "apache/kafka:"):
			kafka = &c
		case strings.HasPrefix(c.Image, "nats:"):
			nats = &c
		}
	}
	if kafka == nil || nats == nil {
		t.Fatal("no Kafka or NATS StatefulSet")
	}
	kenv, _ := statefulEnv(t, "kafka", *kafka)
	ksecrets := secretOf(*kafka)
	checkKafkaAuth(t, "StatefulSet kafka", kenv, func(value, variable string) bool {
		return value == "<secret "+variable+">" && ksecrets[variable] == admin
	})

	job, ok := r.jobs["kafka-setup"]
	if !ok {
		t.Fatal("no Job kafka-setup")
	}
	jc := job.Spec.Template.Spec.Containers[0]
	if !pinned(jc.Image) || !strings.HasPrefix(jc.Image, "apache/kafka:") {
		t.Errorf("Job kafka-setup: image %q", jc.Image)
	}
	jsecrets := secretOf(jc)
	if jsecrets[roles.AdminPasswordEnv] != admin {
		t.Errorf("Job kafka-setup: %s from %q, want %s", roles.AdminPasswordEnv, jsecrets[roles.AdminPasswordEnv], admin)
	}
	for _, role := range roles.Roles() {
		if want := "switchyard-" + string(role) + "-credentials/SWITCHYARD_KAFKA_PASSWORD"; jsecrets[role.PasswordEnv()] != want {
			t.Errorf("Job kafka-setup: %s from %q, want %s", role.PasswordEnv(), jsecrets[role.PasswordEnv()], want)
		}
	}
	// The script it runs is the generated one, from its ConfigMap.
	script := ""
	for _, a := range append(append([]string(nil), jc.Command...), jc.Args...) {
		for _, m := range jc.VolumeMounts {
			if path.Dir(a) != m.MountPath {
				continue
			}
			for _, v := range job.Spec.Template.Spec.Volumes {
				if v.Name == m.Name && v.ConfigMap != nil {
					script = r.configMaps[v.ConfigMap.Name].Data[path.Base(a)]
				}
			}
		}
	}
	if want := generatedBrokerConfigs(t)["../../deploy/k8s/overlays/three-region-ha/kafka-setup.sh"]; script != want {
		t.Errorf("Job kafka-setup (%v %v) does not run the generated setup script from a ConfigMap", jc.Command, jc.Args)
	}
	// KAFKA_BOOTSTRAP: the brokers' admin (inter-broker) listener.
	listeners := kafkaListeners(t, "kafka", kenv["KAFKA_LISTENERS"])
	_, adminPort, _ := net.SplitHostPort(listeners[kenv["KAFKA_INTER_BROKER_LISTENER_NAME"]])
	jenv, _ := statefulEnv(t, "Job kafka-setup", jc)
	for _, br := range splitList(jenv["KAFKA_BOOTSTRAP"]) {
		if _, p, _ := net.SplitHostPort(br); p != adminPort {
			t.Errorf("Job kafka-setup: KAFKA_BOOTSTRAP %s, want the admin listener's port %s", br, adminPort)
		}
	}
	if jenv["KAFKA_BOOTSTRAP"] == "" {
		t.Error("Job kafka-setup: no KAFKA_BOOTSTRAP")
	}

	// NATS: the configuration with its includes, from the ConfigMap.
	marker := setPasswordEnv(t)
	var conf string
	for i := 0; i+1 < len(nats.Args); i++ {
		if nats.Args[i] == "-c" || nats.Args[i] == "--config" {
			conf = nats.Args[i+1]
		}
	}
	dir := t.TempDir()
	for _, cm := range r.configMaps {
		if _, ok := cm.Data[path.Base(conf)]; !ok {
			continue
		}
		for f, data := range cm.Data {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	opts, err := server.ProcessConfigFile(filepath.Join(dir, path.Base(conf)))
	if err != nil {
		t.Fatalf("StatefulSet nats: %s: %v", conf, err)
	}
	checkNATSAuth(t, "StatefulSet nats", opts, marker)
	nsecrets := secretOf(*nats)
	for _, role := range roles.Roles() {
		if role.NATS() == roles.NATSNone {
			continue
		}
		if want := "switchyard-" + string(role) + "-credentials/SWITCHYARD_NATS_PASSWORD"; nsecrets[role.PasswordEnv()] != want {
			t.Errorf("StatefulSet nats: %s from %q, want %s", role.PasswordEnv(), nsecrets[role.PasswordEnv()], want)
		}
	}
}

var natsInclude = regexp.MustCompile(`(?m)^\s*include\s+"?([^"\s;]+)`)

// checkComposeIncludes: every file a NATS service's configuration
// includes is mounted where the server looks for it (beside the
// configuration), from the repository file the test parsed.
func checkComposeIncludes(t *testing.T, where string, s composeService) {
	t.Helper()
	mounts := map[string]string{} // container path -> host path
	for _, v := range s.Volumes {
		if parts := strings.Split(v, ":"); len(parts) >= 2 {
			mounts[parts[1]] = parts[0]
		}
	}
	conf := s.Command[slices.Index(s.Command, "-c")+1]
	b, err := os.ReadFile(filepath.Join("../..", mounts[conf]))
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	for _, m := range natsInclude.FindAllStringSubmatch(string(b), -1) {
		inCtr := path.Join(path.Dir(conf), m[1])
		onHost := path.Join(path.Dir(mounts[conf]), m[1])
		if mounts[inCtr] != "./"+onHost {
			t.Errorf("%s: %s includes %s: %s is mounted from %q, want ./%s", where, conf, m[1], inCtr, mounts[inCtr], onHost)
		}
	}
}
