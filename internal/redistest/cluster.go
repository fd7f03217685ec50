package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Cluster is a Redis Cluster on loopback: primaries only (StartCluster) or
// primaries with replicas (StartClusterWithReplicas).
type Cluster struct {
	Servers []*Server
}

// Addrs returns the "host:port" of every node, for redis.ClusterOptions.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		a[i] = s.Addr()
	}
	return a
}

// StartCluster starts n (at least 3) cluster-enabled servers, joins them
// with redis-cli --cluster create and returns once every node reports
// cluster_state:ok. The nodes are killed when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartClusterWithReplicas(t, n, 0, 15*time.Second)
}

// WaitOK polls CLUSTER INFO on every node until each reports
// cluster_state:ok (the nodes agree on the slot map only after a few
// gossip rounds). It fails the test after 20 s.
func (c *Cluster) WaitOK(t testing.TB) {
	t.Helper()
	poll(t, 20*time.Second, "cluster not ok", func() string {
		for _, s := range c.Servers {
			out, err := runCLI(s.cli, s.Port, "CLUSTER", "INFO")
			if err != nil || !strings.Contains(out, "cluster_state:ok") {
				return fmt.Sprintf("node %s: %v %s", s.Addr(), err, firstLine(out))
			}
		}
		return ""
	})
}

// poll calls try every 20 ms until it returns "" (done), and fails the test
// with try's last complaint, prefixed by what, once d has passed.
func poll(t testing.TB, d time.Duration, what string, try func() string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		if last := try(); last != "" {
			c.Errorf("%s", last)
		}
	}, d, 20*time.Millisecond, "redistest: %s after %v", what, d)
}

// NodeForKey returns the node that serves key's slot.
func (c *Cluster) NodeForKey(t testing.TB, key string) *Server {
	t.Helper()
	slotStr := c.Servers[0].CLI("CLUSTER", "KEYSLOT", key)
	slot, err := strconv.Atoi(strings.TrimSpace(slotStr))
	if err != nil {
		t.Fatalf("redistest: CLUSTER KEYSLOT %q: %q", key, slotStr)
	}
	for _, s := range c.Servers {
		if ownsSlot(s.CLI("CLUSTER", "NODES"), slot) {
			return s
		}
	}
	t.Fatalf("redistest: no node owns slot %d", slot)
	return nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// StartClusterWithReplicas starts primaries (at least 3) primaries, each
// with replicasPerPrimary replicas, joined by redis-cli --cluster create
// --cluster-replicas. nodeTimeout is cluster-node-timeout: how long a node
// may be unreachable before the others mark it failed and a replica of a
// failed primary is promoted, so a short one makes failover tests quick.
// Replicas always attempt failover (cluster-replica-validity-factor 0): a
// freshly created replica must not refuse promotion for data age. It
// returns once every node reports cluster_state:ok and every replica's
// link to its primary is up, so that data written afterwards is copied
// to a replica before the test injects a fault.
func StartClusterWithReplicas(t testing.TB, primaries, replicasPerPrimary int, nodeTimeout time.Duration) *Cluster {
	t.Helper()
	if primaries < 3 {
		t.Fatalf("redistest: a cluster needs at least 3 primaries, not %d", primaries)
	}
	if replicasPerPrimary < 0 || nodeTimeout < time.Millisecond {
		t.Fatalf("redistest: %d replicas per primary, node timeout %v", replicasPerPrimary, nodeTimeout)
	}
	c := &Cluster{}
	for i := 0; i < primaries*(1+replicasPerPrimary); i++ {
		c.Servers = append(c.Servers, Start(t,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
			"--cluster-replica-validity-factor", "0"))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPerPrimary), "--cluster-yes")
	out, err := runCLI(c.Servers[0].cli, c.Servers[0].Port, args...)
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitOK(t)
	c.waitReplicasLinked(t)
	return c
}

// waitReplicasLinked polls INFO replication on every node until each
// replica reports master_link_status:up. It fails the test after 20 s.
func (c *Cluster) waitReplicasLinked(t testing.TB) {
	t.Helper()
	poll(t, 20*time.Second, "replicas not linked", func() string {
		for _, s := range c.Servers {
			out, err := runCLI(s.cli, s.Port, "INFO", "replication")
			if err != nil {
				return fmt.Sprintf("node %s: %v %s", s.Addr(), err, firstLine(out))
			}
			if strings.Contains(out, "role:slave") && !strings.Contains(out, "master_link_status:up") {
				return fmt.Sprintf("replica %s: link to its primary is not up", s.Addr())
			}
		}
		return ""
	})
}

// Running reports whether the server's process is running (not killed).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// WaitFailover polls the running nodes until every one of them reports
// cluster_state:ok and one of them is a primary that serves key's slot,
// and returns that node. It is for after a primary was killed: its
// replica must first see it fail (cluster-node-timeout), win an election
// and take over the slots. It fails the test if that has not happened
// within d.
func (c *Cluster) WaitFailover(t testing.TB, key string, d time.Duration) *Server {
	t.Helper()
	var live []*Server
	for _, s := range c.Servers {
		if s.Running() {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		t.Fatal("redistest: no node is running")
	}
	slotStr, err := runCLI(live[0].cli, live[0].Port, "CLUSTER", "KEYSLOT", key)
	slot, err2 := strconv.Atoi(strings.TrimSpace(slotStr))
	if err != nil || err2 != nil {
		t.Fatalf("redistest: CLUSTER KEYSLOT %q: %v %q", key, err, slotStr)
	}
	var owner *Server
	poll(t, d, "no failover", func() string {
		owner = nil
		for _, s := range live {
			out, err := runCLI(s.cli, s.Port, "CLUSTER", "INFO")
			if err != nil || !strings.Contains(out, "cluster_state:ok") {
				return fmt.Sprintf("node %s: %v %s", s.Addr(), err, firstLine(out))
			}
			nodes, err := runCLI(s.cli, s.Port, "CLUSTER", "NODES")
			if err != nil {
				return fmt.Sprintf("node %s: CLUSTER NODES: %v", s.Addr(), err)
			}
			if ownsSlot(nodes, slot) {
				owner = s
			}
		}
		if owner == nil {
			return fmt.Sprintf("no running primary serves slot %d yet", slot)
		}
		return ""
	})
	return owner
}

// ownsSlot reports whether the CLUSTER NODES output says that the node it
// came from ("myself") is a primary serving slot.
func ownsSlot(nodes string, slot int) bool {
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.Contains(f[2], "myself") || !strings.Contains(f[2], "master") {
			continue
		}
		for _, r := range f[8:] {
			lo, hi, found := strings.Cut(r, "-")
			if !found {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil && a <= slot && slot <= b {
				return true
			}
		}
	}
	return false
}
