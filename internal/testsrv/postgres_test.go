package testsrv

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestPostgresFreshDatabases: each call gives an empty database of its
// own on the server, dropped when its test ends.
func TestPostgresFreshDatabases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var names []string
	t.Run("a", func(t *testing.T) {
		a, b := Postgres(t), Postgres(t)
		if a == b {
			t.Fatalf("two calls gave the same database %s", a)
		}
		for _, dsn := range []string{a, b} {
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			var tables int
			conn.QueryRow(ctx, `SELECT COUNT(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables)
			conn.Close(ctx)
			if tables != 0 {
				t.Errorf("%d tables in a fresh database", tables)
			}
			u, _ := url.Parse(dsn)
			names = append(names, strings.TrimPrefix(u.Path, "/"))
		}
	})
	admin, err := PostgresServer()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var left int
	conn.QueryRow(ctx, `SELECT COUNT(*) FROM pg_database WHERE datname = ANY($1)`, names).Scan(&left)
	if left != 0 {
		t.Errorf("%d of the test's databases survive it", left)
	}
}

// TestPrivateServerDiesWithTheProcess: a test process that started a
// private server and is then SIGKILLed takes the server with it (no
// cleanup of its own could run).
func TestPrivateServerDiesWithTheProcess(t *testing.T) {
	t.Parallel()
	if os.Getenv("TESTSRV_PG_HELPER") != "" {
		if _, err := PostgresServer(); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		u, _ := url.Parse(pgsrv.admin)
		fmt.Println("listening", u.Host)
		time.Sleep(5 * time.Minute)
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPrivateServerDiesWithTheProcess$")
	env := []string{"TESTSRV_PG_HELPER=1"}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "SLUICE_TEST_POSTGRES=") {
			env = append(env, e) // the helper must start a server of its own
		}
	}
	cmd.Env = env
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	sc := bufio.NewScanner(out)
	var host string
	for sc.Scan() {
		if h, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
			host = h
			break
		}
		if strings.HasPrefix(sc.Text(), "error:") {
			t.Fatal(sc.Text())
		}
	}
	if host == "" {
		t.Fatal("the helper did not start a server")
	}
	if c, err := net.Dial("tcp", host); err != nil {
		t.Fatalf("the helper's server at %s does not answer: %v", host, err)
	} else {
		c.Close()
	}
	cmd.Process.Kill()
	cmd.Wait()
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.Dial("tcp", host)
		if err != nil {
			return // gone
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("the server at %s outlived its SIGKILLed test process", host)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
