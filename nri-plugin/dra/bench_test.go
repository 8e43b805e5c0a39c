package dra

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

// BenchmarkPrepareUnprepare measures what the kubelet waits for per
// claim, over the driver's gRPC socket: prepare (the claim read from the
// API server, a fake here, the agent's placement and journal, the ledger
// directory, the CDI spec) and unprepare. Reported, not asserted:
//
//	go test -run '^$' -bench PrepareUnprepare -benchtime 200x ./nri-plugin/dra/
func BenchmarkPrepareUnprepare(b *testing.B) {
	n := startNode(b)
	kubelet := n.kubelet(b)
	ctx := context.Background()
	var prep, unprep []time.Duration
	for i := 0; b.Loop(); i++ {
		c := n.claim(b, fmt.Sprintf("c%d", i), i%2, "512Mi", "5", fmt.Sprintf("p%d", i), false)
		claims := []*drapb.Claim{pbClaim(c)}
		t0 := time.Now()
		resp, err := kubelet.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: claims})
		t1 := time.Now()
		require.NoError(b, err)
		require.Empty(b, resp.Claims[string(c.UID)].Error)
		_, err = kubelet.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: claims})
		unprep = append(unprep, time.Since(t1))
		prep = append(prep, t1.Sub(t0))
		require.NoError(b, err)
	}
	for name, ds := range map[string][]time.Duration{"prepare": prep, "unprepare": unprep} {
		slices.Sort(ds)
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), name+"-p50-us")
		b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds()), name+"-p99-us")
	}
}
