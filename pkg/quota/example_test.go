package quota_test

import (
	"fmt"

	"github.com/gpuslice/gpuslice/pkg/quota"
)

func ExampleParse() {
	pod := map[string]string{
		"gpuslice.io/gpu-memory":               "4Gi",
		"gpuslice.io/gpu-memory/container.big": "8Gi,8Gi",
		"gpuslice.io/gpu-cores":                "30",
	}
	for _, name := range []string{"app", "big"} {
		r, err := quota.Parse(pod, name, nil)
		fmt.Println(name+":", r, err)
	}
	_, err := quota.Parse(map[string]string{"gpuslice.io/gpu-memory": "4Gi", "gpuslice.io/gpu-cores": "33"}, "app", nil)
	fmt.Println(err)
	// Output:
	// app: memory=4Gi cores=30 index=any priority=low <nil>
	// big: memory=8Gi,8Gi cores=30,30 index=any,any priority=low <nil>
	// gpuslice.io/gpu-cores="33": want a percent 0-100 in steps of 5
}
