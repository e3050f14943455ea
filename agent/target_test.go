package agent

import (
	"fmt"
	"testing"
)

func TestParseTargets(t *testing.T) {
	for _, tc := range []struct {
		name    string
		specs   []string
		want    string
		wantErr bool
	}{
		{"defaults", []string{"a=http://h:1"}, "[{a http://h:1 eu l4 0 0 []}]", false},
		{"options", []string{"a=http://h:1,region=us,gpu=h100", "b=http://h:2"}, "[{a http://h:1 us h100 0 0 []} {b http://h:2 eu l4 0 0 []}]", false},
		{"max_batch", []string{"a=http://h:1,max_batch=16", "b=http://h:2,gpu_class=a100,max-batch=8"}, "[{a http://h:1 eu l4 16 0 []} {b http://h:2 eu a100 8 0 []}]", false},
		{"kv_capacity_tokens", []string{"a=http://h:1,kv_capacity_tokens=434976", "b=http://h:2,kv-capacity-tokens=77000,max_batch=8"}, "[{a http://h:1 eu l4 0 434976 []} {b http://h:2 eu l4 8 77000 []}]", false},
		{"kv_capacity_tokens_zero", []string{"a=http://h,kv_capacity_tokens=0"}, "", true},
		{"kv_capacity_tokens_not_integer", []string{"a=http://h,kv_capacity_tokens=1e6"}, "", true},
		{"kv_capacity_tokens_too_big", []string{"a=http://h,kv_capacity_tokens=1000000000000001"}, "", true},
		{"no_url", []string{"a"}, "", true},
		{"unknown_option", []string{"a=http://h,zone=x"}, "", true},
		{"option_without_value", []string{"a=http://h,region"}, "", true},
		{"max_batch_zero", []string{"a=http://h,max_batch=0"}, "", true},
		{"max_batch_negative", []string{"a=http://h,max_batch=-4"}, "", true},
		{"max_batch_not_integer", []string{"a=http://h,max_batch=1.5"}, "", true},
		{"max_batch_too_big", []string{"a=http://h,max_batch=99999999999"}, "", true},
		{"none", nil, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTargets(tc.specs, "eu", "l4")
			if (err != nil) != tc.wantErr || (err == nil && fmt.Sprint(got) != tc.want) {
				t.Errorf("ParseTargets(%q) = %v, %v; want %s (error %v)", tc.specs, got, err, tc.want, tc.wantErr)
			}
		})
	}
}
