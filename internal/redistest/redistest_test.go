package redistest

import (
	"strings"
	"testing"
	"time"
)

func TestStandaloneKillRestartPause(t *testing.T) {
	s := Start(t)
	if got := s.CLI("SET", "k", "v"); got != "OK" {
		t.Fatalf("SET: %q", got)
	}
	port := s.Port
	s.Restart()
	if s.Port != port {
		t.Fatalf("restart moved the server from port %d to %d", port, s.Port)
	}
	// Persistence is off: a restarted server is empty.
	if got := s.CLI("EXISTS", "k"); got != "0" {
		t.Fatalf("EXISTS after restart: %q", got)
	}
	s.Pause()
	if err := PingTimeout(s.Addr(), 200*time.Millisecond); err == nil {
		t.Fatal("a SIGSTOPped server answered PING")
	}
	s.Resume()
	if err := Ping(s.Addr()); err != nil {
		t.Fatalf("PING after SIGCONT: %v", err)
	}
	s.Kill()
	if err := Ping(s.Addr()); err == nil {
		t.Fatal("a killed server answered PING")
	}
}

func TestCluster(t *testing.T) {
	c := StartCluster(t, 3)
	info := c.Servers[1].CLI("CLUSTER", "INFO")
	if !strings.Contains(info, "cluster_known_nodes:3") {
		t.Fatalf("CLUSTER INFO: %s", info)
	}
	n := c.NodeForKey(t, "{x}")
	if got := n.CLI("SET", "{x}", "1"); got != "OK" {
		t.Fatalf("SET on the owning node: %q", got)
	}
}
