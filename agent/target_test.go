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
		{"defaults", []string{"a=http://h:1"}, "[{a http://h:1 eu l4 0}]", false},
		{"options", []string{"a=http://h:1,region=us,gpu=h100", "b=http://h:2"}, "[{a http://h:1 us h100 0} {b http://h:2 eu l4 0}]", false},
		{"max_batch", []string{"a=http://h:1,max_batch=16", "b=http://h:2,gpu_class=a100,max-batch=8"}, "[{a http://h:1 eu l4 16} {b http://h:2 eu a100 8}]", false},
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
