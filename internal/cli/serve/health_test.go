package serve

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// check returns what h answers on HTTP (status and body) and on the gRPC
// health service for service.
func check(t *testing.T, h *Health, service string) (int, string, healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/healthcheck", nil))
	resp, err := h.GRPC().Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatal(err)
	}
	return rec.Code, rec.Body.String(), resp.Status
}

// TestHealthConditions: serving until a condition is unmet, again once
// every condition holds, and never again after Stopping, on both faces
// and for every service named.
func TestHealthConditions(t *testing.T) {
	h := NewHealth("svc")
	for _, s := range []string{"", "svc"} {
		if code, body, st := check(t, h, s); code != http.StatusOK || body != "OK" || st != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("new, %q: %d %q %v", s, code, body, st)
		}
	}
	h.Set("store", false)
	h.Set("config", false)
	code, body, st := check(t, h, "svc")
	if code != http.StatusInternalServerError || st != healthpb.HealthCheckResponse_NOT_SERVING || !strings.Contains(body, "config, store") {
		t.Fatalf("two unmet: %d %q %v", code, body, st)
	}
	h.Set("store", true)
	if h.OK() {
		t.Fatal("serving while config is unmet")
	}
	h.Set("config", true)
	if code, _, st := check(t, h, ""); code != http.StatusOK || st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("all met: %d %v", code, st)
	}
	h.Stopping()
	h.Set("store", true)
	code, body, st = check(t, h, "svc")
	if code != http.StatusInternalServerError || st != healthpb.HealthCheckResponse_NOT_SERVING || !strings.Contains(body, "stopping") {
		t.Fatalf("stopping: %d %q %v", code, body, st)
	}
}

// TestListenUnixStale: a socket file nobody accepts on is replaced; a
// socket in use and a file that is not a socket are left alone, with an
// error; closing the listener removes the file.
func TestListenUnixStale(t *testing.T) {
	dir, err := os.MkdirTemp("", "sock") // short: a socket path is at most ~100 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "s.sock")

	// A stale socket: listened on, then the file left behind.
	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the stale socket is not there: %v", err)
	}
	var ls Listeners
	ln, err := ls.ListenUnix("--grpc", path)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.WriteString(c, "hi")
			c.Close()
		}
	}()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c)
	c.Close()
	if string(b) != "hi" {
		t.Fatalf("read %q through the new socket", b)
	}

	// In use: refused, and the file stays.
	var other Listeners
	if _, err := other.ListenUnix("--grpc", path); err == nil || !strings.Contains(err.Error(), "another process listens") || !strings.HasPrefix(err.Error(), "--grpc: ") {
		t.Fatalf("over a socket in use: %v", err)
	}
	ls.Close()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("closing did not remove the socket: %v", err)
	}

	// Not a socket: refused, and the file stays.
	if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := other.ListenUnix("", path); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("over a regular file: %v", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "data" {
		t.Fatalf("the regular file was touched: %q %v", b, err)
	}
}
