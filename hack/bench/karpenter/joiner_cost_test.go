//go:build test_performance

// Written for joiner's hack/bench/karpenter_side_by_side.py (not part of Karpenter): copied into a
// scratch copy of Karpenter's scheduling package, it solves the benchmark's own diverse pods once
// per size and prints one line of figures the Go benchmark does not report: the NodeClaims, their
// cheapest compatible offering's total $/h, and where the pods labelled my-label=a went by zone.

package scheduling_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"
	"sigs.k8s.io/karpenter/pkg/operator/injection"
	"sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/karpenter/pkg/test"
)

func TestJoinerCost(t *testing.T) {
	sizes := os.Getenv("JOINER_SIZES")
	if sizes == "" {
		t.Skip("JOINER_SIZES not set")
	}
	for _, field := range strings.Split(sizes, ",") {
		count, err := strconv.Atoi(field)
		if err != nil {
			t.Fatalf("JOINER_SIZES: %s", err)
		}
		pods := makeDiversePods(count)
		ctx := options.ToContext(injection.WithControllerName(context.Background(), "provisioner"), test.Options())
		s, err := setupScheduler(ctx, pods, scheduling.NumConcurrentReconciles(5))
		if err != nil {
			t.Fatalf("setup: %s", err)
		}
		results, err := s.Solve(ctx, pods)
		if err != nil {
			t.Fatalf("solve: %s", err)
		}
		total := 0.0
		zoneOf := map[string]string{}
		nodeZones := map[string]int{}
		for _, nc := range results.NewNodeClaims {
			best := -1.0
			bestZone := "?"
			for _, it := range nc.InstanceTypeOptions {
				if o := it.Offerings.Available().Compatible(nc.Requirements).Cheapest(); o != nil && (best < 0 || o.Price < best) {
					best = o.Price
					bestZone = o.Zone()
				}
			}
			if best > 0 {
				total += best
			}
			if z := nc.Requirements.Get(corev1.LabelTopologyZone); z.Len() == 1 {
				bestZone = z.Any()
			}
			nodeZones[bestZone]++
			for _, p := range nc.Pods {
				zoneOf[p.Namespace+"/"+p.Name] = bestZone
			}
		}
		labelled := map[string]int{}
		for _, p := range pods {
			if p.Labels["my-label"] == "a" {
				labelled[zoneOf[p.Namespace+"/"+p.Name]]++
			}
		}
		fmt.Printf("JOINER-COST pods=%d nodes=%d price=%.4f unschedulable=%d a-by-zone=%s nodes-by-zone=%s\n",
			count, len(results.NewNodeClaims), total, len(results.PodErrors), render(labelled), render(nodeZones))
	}
}

func render(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
	}
	return strings.Join(parts, ",")
}
