package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/emulator"
)

// The Gemini cells of the provider conformance matrix, through the binary
// against a separate `sluice emulate`: a run from a fresh state directory,
// a SIGKILL loop, and a wrong key.

// writeGeminiInput writes n native Gemini lines over two models.
func writeGeminiInput(t *testing.T, dir string, n int) (string, []string) {
	t.Helper()
	return writeRequests(t, filepath.Join(dir, "in.jsonl"), n, func(i int) (string, string) {
		id := fmt.Sprintf("g-%05d", i)
		model := []string{"gemini-2.5-flash", "gemini-2.5-flash", "gemini-2.5-pro"}[i%3]
		return id, fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1beta/models/%s:generateContent","body":{"contents":[{"role":"user","parts":[{"text":"question %d"}]}],"generationConfig":{"maxOutputTokens":32}}}`, id, model, i)
	})
}

func geminiEnv(addr, key string) []string {
	return []string{"GEMINI_API_KEY=" + key, "GOOGLE_API_KEY=", "GOOGLE_GEMINI_BASE_URL=http://" + addr + "/gemini"}
}

// familyStats reads /_emulator/stats' by_family entry of one family.
func (e *emulatorProc) familyStats(t *testing.T, family string) map[string]int64 {
	t.Helper()
	resp, err := http.Get("http://" + e.addr + "/_emulator/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		ByFamily map[string]map[string]int64 `json:"by_family"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st.ByFamily[family]
}

// geminiJob starts an emulator whose key is gm-right, with emuArgs, and
// writes n Gemini requests to a temporary directory (writeGeminiInput),
// the output to be out.jsonl there.
func geminiJob(t *testing.T, n int, emuArgs ...string) (emu *emulatorProc, dir, in string, ids []string, out string) {
	t.Helper()
	emu = startEmulatorEnv(t, []string{"SLUICE_EMULATOR_API_KEY=gm-right"}, emuArgs...)
	dir = t.TempDir()
	in, ids = writeGeminiInput(t, dir, n)
	return emu, dir, in, ids, filepath.Join(dir, "out.jsonl")
}

// TestGeminiRunCompletes: `sluice run --provider gemini --base-url
// EMU/gemini` from a fresh state directory ends 0 with every custom_id
// once, in input order, each a GenerateContentResponse, and the emulator
// ran each request once.
func TestGeminiRunCompletes(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	emu, dir, in, ids, out := geminiJob(t, 90, "--batch-time", "300ms")
	r := runSluice(t, []string{"GEMINI_API_KEY=gm-right", "GOOGLE_API_KEY="}, "run", in, "--out", out,
		"--provider", "gemini", "--base-url", "http://"+emu.addr+"/gemini", "--state", filepath.Join(dir, "state"),
		"--max-batch-requests", "20", "--poll-interval", "50ms", "--max-poll-interval", "200ms", "--rate", "-1")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	for _, o := range checkOutput(t, out, ids) {
		var body struct {
			Candidates []struct {
				Content struct {
					Parts []struct{ Text string }
				}
			}
			ModelVersion string
		}
		if o.Response == nil || o.Response.StatusCode != 200 || json.Unmarshal(o.Response.Body, &body) != nil ||
			len(body.Candidates) != 1 || !strings.HasPrefix(body.Candidates[0].Content.Parts[0].Text, "echo: ") {
			t.Fatalf("%s: %+v", o.CustomID, o)
		}
	}
	g := emu.familyStats(t, "gemini")
	if g["requests_processed"] != 90 || g["requests_processed_more_than_once"] != 0 || g["batches_created"] < 5 {
		t.Errorf("emulator gemini stats: %v", g)
	}
}

// TestGeminiCrashLoop SIGKILLs `sluice run --provider gemini` at many
// moments (uploading, creating, polling, downloading, merging) with slow
// calls and reset connections at the emulator, re-runs it each time, and
// checks the end: every custom_id once in order, nothing executed twice at
// the emulator, no chunk left in an intent state.
func TestGeminiCrashLoop(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	emu := startEmulator(t, "--batch-time", "800ms", "--slow-rate", "0.3", "--slow-delay", "100ms", "--seed", "9",
		"--http-fault-rate", "0.05")
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	in, ids := writeGeminiInput(t, dir, 240)
	out := filepath.Join(dir, "out.jsonl")
	env := geminiEnv(emu.addr, "gm-any")
	args := []string{"run", in, "--out", out, "--provider", "gemini", "--max-batch-requests", "12", "--poll-interval", "20ms",
		"--max-poll-interval", "80ms", "--rate", "-1", "--reconcile-grace", "1s", "--state", state}
	kills := killRuns(t, func() *exec.Cmd { return sluiceCmd(env, args...) }, 20, randomDelays(rand.New(rand.NewPCG(5, 6))))
	if kills < 8 {
		t.Fatalf("only %d kills landed; the job finished too fast to test crashes", kills)
	}
	r := runSluice(t, env, args...)
	if r.code != 0 {
		t.Fatalf("final run: exit %d\n%s", r.code, r.stderr)
	}
	for _, o := range checkOutput(t, out, ids) {
		if o.Response == nil || o.Response.StatusCode != 200 {
			t.Fatalf("%s: %+v, want success", o.CustomID, o)
		}
	}
	if st := emu.stats(t); st["requests_processed_more_than_once"] != 0 {
		t.Errorf("requests processed more than once: %d after %d kills", st["requests_processed_more_than_once"], kills)
	}
	if g := emu.familyStats(t, "gemini"); g["requests_processed_more_than_once"] != 0 || g["requests_processed"] < 240 {
		t.Errorf("gemini family stats after %d kills: %v", kills, g)
	}
	_, cs := stateChunks(t, state)
	for _, c := range cs {
		if c.State == sluice.ChunkUploading || c.State == sluice.ChunkCreating || !c.State.Terminal() {
			t.Errorf("chunk %d left in %s", c.ID, c.State)
		}
	}
	t.Logf("%d kills", kills)
}

// TestGeminiWrongKeyExits1: Google answers a wrong key 400 API_KEY_INVALID;
// sluice stops with exit 1 without printing the key, and the same command
// with the right key then completes.
func TestGeminiWrongKeyExits1(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	emu, dir, in, ids, out := geminiJob(t, 30, "--batch-time", "200ms")
	args := []string{"run", in, "--out", out, "--provider", "gemini", "--state", filepath.Join(dir, "state"),
		"--max-batch-requests", "10", "--poll-interval", "50ms", "--max-poll-interval", "200ms", "--rate", "-1"}
	r := runSluice(t, geminiEnv(emu.addr, "gm-wrong-secret"), args...)
	if r.code != 1 {
		t.Fatalf("wrong key: exit %d, want 1\n%s", r.code, r.stderr)
	}
	if strings.Contains(r.stderr+r.stdout, "gm-wrong-secret") {
		t.Errorf("the key appears in the output:\n%s", r.stderr)
	}
	if !strings.Contains(r.stderr, "API key not valid") {
		t.Errorf("the error does not say the key was refused:\n%s", r.stderr)
	}
	// GOOGLE_API_KEY wins over GEMINI_API_KEY, as in the Google SDKs.
	env := append(geminiEnv(emu.addr, "gm-wrong-secret"), "GOOGLE_API_KEY=gm-right")
	if r := runSluice(t, env, args...); r.code != 0 {
		t.Fatalf("right key in GOOGLE_API_KEY: exit %d\n%s", r.code, r.stderr)
	}
	checkOutput(t, out, ids)
}

// TestEmulateBannerAndInfo: `sluice emulate` prints one line per family
// with its base URL, GET /_emulator/info answers the same table, and each
// base URL serves its family's listing there.
func TestEmulateBannerAndInfo(t *testing.T) {
	cmd := sluiceCmd(nil, "emulate", "--addr", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	banner := map[string]string{}
	var root string
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 5 && f[0] == "sluice" && f[3] == "on":
			root = f[4]
		case len(f) == 2 && strings.HasSuffix(f[0], ":") && strings.Contains(f[1], "="):
			_, u, _ := strings.Cut(f[1], "=")
			banner[strings.TrimSuffix(f[0], ":")] = u
		}
		if len(banner) == len(emulator.Families) {
			break
		}
	}
	go io.Copy(io.Discard, stderr)
	if root == "" || len(banner) != len(emulator.Families) {
		t.Fatalf("banner: root %q, families %v", root, banner)
	}
	resp, err := http.Get(root + "/_emulator/info")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info struct {
		BaseURLs map[string]string `json:"base_urls"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"openai": root + "/v1", "azure": root + "/openai/v1", "anthropic": root,
		"cloudflare": root + "/client/v4", "gemini": root + "/gemini", "mistral": root + "/mistral", "together": root + "/together/v1", "xai": root + "/xai/v1",
		"vertex": root}
	for fam, u := range want {
		if banner[fam] != u || info.BaseURLs[fam] != u {
			t.Errorf("%s: banner %q, info %q, want %q", fam, banner[fam], info.BaseURLs[fam], u)
		}
	}
	// Each base URL is where that family's SDK finds its API.
	for fam, path := range map[string]string{"openai": "/batches", "azure": "/batches", "anthropic": "/v1/messages/batches",
		"gemini": "/v1beta/batches", "mistral": "/v1/batch/jobs", "together": "/batches", "xai": "/batches",
		"vertex": "/v1/projects/p/locations/us-central1/batchPredictionJobs"} {
		r, err := http.Get(info.BaseURLs[fam] + path)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != 200 {
			t.Errorf("%s: GET %s%s: %d", fam, info.BaseURLs[fam], path, r.StatusCode)
		}
	}
}
