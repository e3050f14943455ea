package settings_test

import (
	"encoding/json"
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/optimizer/plan"
	"github.com/switchyard-llm/switchyard/streams/settings"
)

// everyField is a plan.Settings with every field set to a value other
// than its zero (durations in whole milliseconds, as the topic keeps
// them), found by reflection so that a field added later is covered.
func everyField(t *testing.T) plan.Settings {
	t.Helper()
	var s plan.Settings
	v := reflect.ValueOf(&s).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch {
		case f.Type() == reflect.TypeOf(time.Duration(0)):
			f.SetInt(int64(time.Duration(1500+i) * time.Millisecond))
		case f.Kind() == reflect.Float64:
			f.SetFloat(0.25 + float64(i))
		case f.Kind() == reflect.Bool:
			f.SetBool(true)
		case f.Kind() == reflect.Uint32:
			f.SetUint(uint64(7 + i))
		case f.Type() == reflect.TypeOf([]string(nil)):
			f.Set(reflect.ValueOf([]string{"us", "eu"}))
		case f.Type() == reflect.TypeOf(map[string]float64(nil)):
			f.Set(reflect.ValueOf(map[string]float64{"e1": 3.5}))
		case f.Type() == reflect.TypeOf(map[string]map[string]float64(nil)):
			f.Set(reflect.ValueOf(map[string]map[string]float64{"us": {"eu": 80}}))
		default:
			t.Fatalf("plan.Settings.%s (%s): teach everyField and the settings topic's JSON this type", v.Type().Field(i).Name, f.Type())
		}
	}
	return s
}

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// keys returns every object key in the JSON value v, recursively, except
// those of maps keyed by data (cluster, region and engine names).
func keys(v any, path string, out map[string]bool) {
	m, ok := v.(map[string]any)
	if !ok {
		return
	}
	for k, sub := range m {
		out[path+k] = true
		if k == "region_rtt_ms" || k == "replica_capacity_rps" {
			continue
		}
		keys(sub, path+k+".", out)
	}
}

// TestRecordJSONSnakeCaseRoundTrip: a settings record with every
// optimizer setting set is written with snake_case keys only (no Go
// field name) and reads back equal.
func TestRecordJSONSnakeCaseRoundTrip(t *testing.T) {
	s := everyField(t)
	rec := settings.Record{Component: settings.Optimizer, StartedUnixMs: 1793534430000, Optimizer: &s}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var raw any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	ks := map[string]bool{}
	keys(raw, "", ks)
	for k := range ks {
		if !snakeCase.MatchString(k[len(k)-len(lastPart(k)):]) {
			t.Errorf("key %q is not snake_case:\n%s", k, b)
		}
	}
	for _, k := range []string{"optimizer.max_utilization", "optimizer.estimate_ttl_ms", "optimizer.replica_capacity_rps"} {
		if !ks[k] {
			t.Errorf("no %q in %s", k, b)
		}
	}
	var back settings.Record
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, rec) {
		t.Errorf("read back\n%+v\nwrote\n%+v\nJSON %s", *back.Optimizer, *rec.Optimizer, b)
	}
}

func lastPart(k string) string {
	for i := len(k) - 1; i >= 0; i-- {
		if k[i] == '.' {
			return k[i+1:]
		}
	}
	return k
}

// TestRecordJSONReadsGoFieldNames: a record written by builds that used
// the Go field names (durations in nanoseconds) still reads, to the same
// settings as its snake_case form.
func TestRecordJSONReadsGoFieldNames(t *testing.T) {
	old := `{"component":"optimizer","started_unix_ms":1793534430000,"optimizer":{"MaxUtilization":0.8,"ChurnWeight":0,` +
		`"ChurnRelative":0.05,"EstimateTTL":30000000000,"NetworkTTL":120000000000,"Clusters":["us","eu"],"MinDemandRPS":0.1,` +
		`"IdleDemandRPS":0.5,"ProbeShare":0.02,"RegionRTTms":{"us":{"eu":80}},"DefaultRTTms":50,"StrictResidency":true,` +
		`"MinNetworkSamples":20,"ReplicaCapacityRPS":{"e1":3.5}}}`
	want := plan.Settings{MaxUtilization: 0.8, ChurnRelative: 0.05, EstimateTTL: 30 * time.Second, NetworkTTL: 2 * time.Minute,
		Clusters: []string{"us", "eu"}, MinDemandRPS: 0.1, IdleDemandRPS: 0.5, ProbeShare: 0.02,
		RegionRTTms: map[string]map[string]float64{"us": {"eu": 80}}, DefaultRTTms: 50, StrictResidency: true,
		MinNetworkSamples: 20, ReplicaCapacityRPS: map[string]float64{"e1": 3.5}}
	var rec settings.Record
	if err := json.Unmarshal([]byte(old), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Optimizer == nil || !reflect.DeepEqual(*rec.Optimizer, want) {
		t.Fatalf("old record read as %+v, want %+v", rec.Optimizer, want)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var again settings.Record
	if err := json.Unmarshal(b, &again); err != nil || !reflect.DeepEqual(*again.Optimizer, want) {
		t.Fatalf("rewritten as %s, read as %+v (%v)", b, again.Optimizer, err)
	}
}

// TestRecordJSONRejectsWrongTypes: an optimizer object whose values have
// the wrong types is an error, not settings at their defaults.
func TestRecordJSONRejectsWrongTypes(t *testing.T) {
	for _, in := range []string{
		`{"component":"optimizer","optimizer":{"max_utilization":"high"}}`,
		`{"component":"optimizer","optimizer":{"MaxUtilization":"high"}}`,
		`{"component":"optimizer","optimizer":[1]}`,
	} {
		var rec settings.Record
		if err := json.Unmarshal([]byte(in), &rec); err == nil {
			t.Errorf("%s: no error, read %+v", in, rec.Optimizer)
		}
	}
}
