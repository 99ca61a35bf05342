package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-batch/sluice/internal/testsrv"
)

// The report (sluice report JOB --html FILE) through the binary, on SQLite
// and PostgreSQL, opened in headless Chromium (Debian's chromium package;
// scripts/test.sh installs it).

// reportJob is what status --json says of the job the report is about.
type reportJob struct {
	ID       string           `json:"id"`
	State    string           `json:"state"`
	Requests map[string]int64 `json:"requests"`
	Total    int64            `json:"total_requests"`
	Chunks   map[string]int   `json:"chunks"`
	Summary  *struct {
		RetryBatches int `json:"retry_batches"`
	} `json:"summary"`
}

func reportStatus(t *testing.T, env []string) reportJob {
	t.Helper()
	r := runSluice(t, env, "status", "--json")
	var doc struct{ Jobs []reportJob }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &doc) != nil || len(doc.Jobs) != 1 {
		t.Fatalf("status: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	return doc.Jobs[0]
}

// writeMarkupInput writes n chat requests whose custom_ids carry markup,
// to prove the page escapes what comes from the data.
func writeMarkupInput(t *testing.T, dir string, n int) string {
	t.Helper()
	p, _ := writeRequests(t, filepath.Join(dir, "in.jsonl"), n, func(i int) (string, string) {
		id := fmt.Sprintf(`<img src=x onerror="document.body.dataset.pwned=1">&r%03d`, i)
		return id, fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"q %d"}]}}`, id, i)
	})
	return p
}

// backends runs f on SQLite and on PostgreSQL (a fresh database).
func reportBackends(t *testing.T, f func(t *testing.T, db []string)) {
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); f(t, nil) })
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		f(t, []string{"--db", testsrv.Postgres(t)})
	})
}

func TestReportFinishedJobWithFailures(t *testing.T) {
	t.Parallel()
	reportBackends(t, func(t *testing.T, db []string) {
		dir := t.TempDir()
		emu := startEmulator(t, "--line-error-rate", "0.15", "--seed", "7")
		in := writeMarkupInput(t, dir, 120)
		env := []string{"SLUICE_STATE=" + filepath.Join(dir, "state"), "OPENAI_API_KEY=k", "SLUICE_DB="}
		r := runSluice(t, env, append([]string{"run", in, "--out", filepath.Join(dir, "out.jsonl"), "--provider", "openai",
			"--base-url", "http://" + emu.addr + "/v1", "--max-batch-requests", "15", "--rate", "-1",
			"--max-cost", "5", "--poll-interval", "50ms", "--max-poll-interval", "200ms"}, db...)...)
		if r.code != exitFailures {
			t.Fatalf("run: exit %d, want %d (finished with failed requests)\n%s", r.code, exitFailures, r.stderr)
		}
		st := reportStatus(t, append(env, dbEnv(db)...))
		if st.State != "done" || st.Requests["failed"] == 0 || st.Summary == nil || st.Summary.RetryBatches == 0 {
			t.Fatalf("status: %+v, want a done job with failures and retries", st)
		}
		page := filepath.Join(dir, "report.html")
		rr := runSluice(t, env, append([]string{"report", st.ID, "--html", page}, db...)...)
		if rr.code != 0 {
			t.Fatalf("report: exit %d\n%s", rr.code, rr.stderr)
		}
		checkReportFile(t, page)
		dom := openInChromium(t, page)
		rows := st.Chunks["done"] + st.Chunks["failed"]
		checkReportDOM(t, dom, st, rows)
		if n := strings.Count(dom, " b-retry\""); n != st.Summary.RetryBatches {
			t.Errorf("%d retry rows on the time line, status says %d retry batches", n, st.Summary.RetryBatches)
		}
		// Every final failure is counted under its code, with examples.
		var failed int64
		for _, m := range regexp.MustCompile(`<tr class="code-row" data-code="[^"]*" data-count="(\d+)"`).FindAllStringSubmatch(section(dom, `id="req-errors"`, "</table>"), -1) {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			failed += n
		}
		if failed != st.Requests["failed"] {
			t.Errorf("request errors by code add up to %d, status says %d failed", failed, st.Requests["failed"])
		}
		if n := strings.Count(section(dom, `id="req-errors"`, "</table>"), `class="example"`); n == 0 {
			t.Error("no example of a failed request")
		}
		// custom_ids with markup are text, never elements.
		if strings.Contains(dom, "<img") || strings.Contains(dom, `data-pwned`) {
			t.Error("a custom_id's markup became part of the page")
		}
		if !strings.Contains(dom, "&lt;img src=x onerror=") {
			t.Error("the failed requests' custom_ids are not shown, escaped")
		}
		// Spend against the cap: the cap line and the spend series.
		spend := section(dom, `id="spend"`, "</svg>")
		if !strings.Contains(spend, `class="guide g-cap"`) || !strings.Contains(spend, `data-series="spent"`) {
			t.Errorf("the spend chart has no cap line or spend series:\n%s", spend)
		}
		// Requests done: one point per ended batch on each series.
		progress := section(dom, `id="progress"`, "</svg>")
		if n := strings.Count(progress, `class="pt d-succeeded"`); n != rows {
			t.Errorf("the progress chart has %d points, want one per batch (%d)", n, rows)
		}
		// Tokens: three bars per model (one model here).
		if n := strings.Count(dom, `class="tbar `); n != 3 {
			t.Errorf("%d token bars, want 3", n)
		}
	})
}

func TestReportJobStillRunning(t *testing.T) {
	t.Parallel()
	reportBackends(t, func(t *testing.T, db []string) {
		dir := t.TempDir()
		emu := startEmulator(t, "--batch-time", "1h")
		in, _ := writeInput(t, dir, 60)
		env := []string{"SLUICE_STATE=" + filepath.Join(dir, "state"), "OPENAI_API_KEY=k", "SLUICE_DB="}
		r := runSluice(t, env, append([]string{"run", in, "--out", filepath.Join(dir, "out.jsonl"), "--provider", "openai",
			"--base-url", "http://" + emu.addr + "/v1", "--max-batch-requests", "20", "--rate", "-1", "--once"}, db...)...)
		if r.code != exitStopped {
			t.Fatalf("run --once: exit %d, want %d\n%s", r.code, exitStopped, r.stderr)
		}
		st := reportStatus(t, append(env, dbEnv(db)...))
		if st.State == "done" || st.Chunks["submitted"] == 0 {
			t.Fatalf("status: %+v, want a job with live batches", st)
		}
		page := filepath.Join(dir, "report.html")
		if rr := runSluice(t, env, append([]string{"report", st.ID, "--html", page}, db...)...); rr.code != 0 {
			t.Fatalf("report: exit %d\n%s", rr.code, rr.stderr)
		}
		dom := openInChromium(t, page)
		rows := 0
		for _, n := range st.Chunks {
			rows += n
		}
		checkReportDOM(t, dom, st, rows)
		if !strings.Contains(dom, `id="still-running"`) {
			t.Error("the page does not say the job is still running")
		}
		if n := strings.Count(dom, `class="batch-row b-running"`); n != st.Chunks["submitted"] {
			t.Errorf("%d running batch rows, want %d", n, st.Chunks["submitted"])
		}
		if !strings.Contains(dom, "no batch has ended yet") {
			t.Error("the progress chart does not say no batch has ended")
		}
	})
}

func TestReportUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := []string{"SLUICE_STATE=" + filepath.Join(dir, "state"), "SLUICE_DB="}
	h := runSluice(t, env, "report", "--help")
	for _, want := range []string{"--html", "--prices", "--db", "--state", "self-contained"} {
		if h.code != 0 || !strings.Contains(h.stdout, want) {
			t.Errorf("report --help (exit %d) does not explain %s:\n%s", h.code, want, h.stdout)
		}
	}
	r := runSluice(t, env, "report", "no-such-job", "--html", filepath.Join(dir, "r.html"))
	if r.code != exitUsage || !strings.Contains(r.stderr, "no-such-job") {
		t.Errorf("report of a missing job: exit %d, want %d naming it\n%s", r.code, exitUsage, r.stderr)
	}
	r = runSluice(t, env, "report", "no-such-job")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--html") {
		t.Errorf("report without --html: exit %d, want %d naming --html\n%s", r.code, exitUsage, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "r.html")); !os.IsNotExist(err) {
		t.Errorf("a page was written for a missing job: %v", err)
	}
}

// dbEnv passes a --db on to status through $SLUICE_DB.
func dbEnv(db []string) []string {
	if len(db) == 2 {
		return []string{"SLUICE_DB=" + db[1]}
	}
	return nil
}

// checkReportFile checks the page is one self-contained file, written
// with mode 0666 less the umask, no temp file left.
func checkReportFile(t *testing.T, page string) {
	t.Helper()
	fi, err := os.Stat(page)
	if err != nil {
		t.Fatal(err)
	}
	if want := os.FileMode(0o666) &^ umask(t); fi.Mode().Perm() != want {
		t.Errorf("report mode %v, want %v", fi.Mode().Perm(), want)
	}
	b, _ := os.ReadFile(page)
	for _, bad := range []string{"http://", "https://", "<link", "src=\"", "@import", "url("} {
		if bad == "http://" && bytes.Count(b, []byte(bad)) == bytes.Count(b, []byte("http://www.w3.org/2000/svg")) {
			continue // the SVG namespace is a name, not a fetch
		}
		if bytes.Contains(b, []byte(bad)) {
			t.Errorf("the page refers outside itself: %q", bad)
		}
	}
	ents, _ := os.ReadDir(filepath.Dir(page))
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("temp file left: %s", e.Name())
		}
	}
}

// checkReportDOM checks the page Chromium rendered: its script ran with
// no error, the charts are there with a row per batch, and the summary
// says what status says.
func checkReportDOM(t *testing.T, dom string, st reportJob, rows int) {
	t.Helper()
	if !strings.Contains(dom, `data-ok="true"`) {
		t.Errorf("the page's script did not finish rendering:\n%.2000s", dom)
	}
	if strings.Contains(dom, `data-errors=`) || !strings.Contains(dom, `<div id="js-errors"></div>`) {
		t.Errorf("script errors in the page: %s", section(dom, `id="js-errors"`, "</div>"))
	}
	if !strings.Contains(dom, fmt.Sprintf(`data-rows="%d"`, rows)) || strings.Count(dom, `<g class="batch-row `) != rows {
		t.Errorf("the time line has %d rows (script counted %s), want one per batch: %d",
			strings.Count(dom, `<g class="batch-row `), section(dom, `data-rows="`, `"`), rows)
	}
	if !strings.Contains(dom, `data-charts="4"`) {
		t.Errorf("want 4 charts, the script counted %s", section(dom, `data-charts="`, `"`))
	}
	for _, id := range []string{"timeline", "progress", "spend", "tokens"} {
		if !strings.Contains(dom, `<svg id="`+id+`" class="chart"`) {
			t.Errorf("no %s chart", id)
		}
	}
	for k, want := range map[string]string{"state": st.State, "total": commas(st.Total),
		"succeeded": commas(st.Requests["succeeded"]), "failed": commas(st.Requests["failed"]),
		"pending": commas(st.Requests["pending"])} {
		if got := section(dom, `<td data-k="`+k+`">`, "</td>"); got != want {
			t.Errorf("summary %s is %q, status says %q", k, got, want)
		}
	}
	if !strings.Contains(dom, st.ID) {
		t.Errorf("the page does not name job %s", st.ID)
	}
}

// section is the text of s after the first from, up to the next to.
func section(s, from, to string) string {
	i := strings.Index(s, from)
	if i < 0 {
		return ""
	}
	s = s[i+len(from):]
	if j := strings.Index(s, to); j >= 0 {
		return s[:j]
	}
	return s
}

// chromiumPath finds Debian's headless-capable chromium.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Fatal("headless Chromium not found: install Debian's chromium package (apt-get install -y chromium); scripts/test.sh installs it when /usr/bin/chromium is missing")
	return ""
}

// openInChromium loads the page in headless Chromium with no network,
// fails on any console message, returns the DOM after its script ran, and keeps a screenshot beside it
// (and in $SLUICE_TEST_ARTIFACTS when set).
func openInChromium(t *testing.T, page string) string {
	t.Helper()
	bin := chromiumPath(t)
	tmp := t.TempDir()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--proxy-server=127.0.0.1:9"}
	runs := 0
	// run starts Chromium with a fresh profile; a browser that crashes
	// (headless Chromium sometimes dies on a signal as it shuts down, on
	// a loaded machine) is started again, twice at most, and logged.
	run := func(args ...string) ([]byte, string) {
		for try := 1; ; try++ {
			runs++
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			profile := "--user-data-dir=" + filepath.Join(tmp, fmt.Sprintf("profile%d", runs))
			cmd := exec.CommandContext(ctx, bin, append(append(append(base, profile), args...), "file://"+page)...)
			var so, se bytes.Buffer
			cmd.Stdout, cmd.Stderr = &so, &se
			err := cmd.Run()
			cancel()
			if err == nil {
				return so.Bytes(), se.String()
			}
			if try == 3 {
				t.Fatalf("chromium %v: %v\n%s", args, err, se.String())
			}
			t.Logf("chromium %v: %v; starting it again", args, err)
		}
	}
	// The console, on stderr: any message (an error, a refused fetch) fails.
	out, console := run("--enable-logging=stderr", "--v=0", "--dump-dom")
	for _, l := range strings.Split(console, "\n") {
		if strings.Contains(l, ":CONSOLE") {
			t.Errorf("console message from the page: %s", l)
		}
	}
	dom := string(out)
	shot := filepath.Join(tmp, "report.png")
	run("--screenshot="+shot, "--window-size=1280,2600", "--hide-scrollbars")
	png, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("no screenshot at %s: %v", shot, err)
	}
	t.Logf("report screenshot: %s", shot)
	if dir := os.Getenv("SLUICE_TEST_ARTIFACTS"); dir != "" {
		name := strings.NewReplacer("/", "_").Replace(t.Name()) + ".png"
		if err := os.MkdirAll(dir, 0o755); err == nil {
			if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err == nil {
				t.Logf("report screenshot kept: %s", filepath.Join(dir, name))
			}
		}
	}
	return dom
}
