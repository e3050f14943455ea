package estimate

import "testing"

func TestGPUFamilyOfVendorLabels(t *testing.T) {
	for label, want := range map[string]string{
		"h100": "h100", "H100": "h100", "NVIDIA-H100-80GB-HBM3": "h100", "nvidia.com/gpu.product=NVIDIA-H100-PCIe": "h100",
		"H800": "h100", "NVIDIA-H200": "h100", "GH200-480GB": "h100", "B200": "h100", "AMD Instinct MI300X": "",
		"a100": "a100", "A100-SXM4-40GB": "a100", "NVIDIA-A100-80GB-PCIe": "a100", "A800": "a100",
		"l4": "l4", "NVIDIA-L4": "l4", "nvidia_l4_24gb": "l4",
		"NVIDIA-L40S": "", "A10G": "", "Tesla-T4": "", "": "", "v100": "",
	} {
		if got := gpuFamily(label); got != want {
			t.Errorf("%q: %q, want %q", label, got, want)
		}
	}
	if PriorFor("NVIDIA-H100-80GB-HBM3") != PriorFor("h100") || PriorFor("NVIDIA-L40S") != PriorFor("") {
		t.Error("a vendor label does not take its family's prior")
	}
}
