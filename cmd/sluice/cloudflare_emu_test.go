package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Issue 21 item 8: `sluice emulate` must not let a run pass that the live
// Workers AI API fails. A batch for a model without async support is
// refused there with 400 code 5007, so sluice run against the emulator
// finishes with every line failed, naming it (exit 4); the emulator's
// --cloudflare-any-model lifts the check.
func TestCloudflareModelWithoutAsyncFailsAsLive(t *testing.T) {
	t.Parallel()
	const model = "@cf/meta/llama-2-7b-chat-int8"
	dir := t.TempDir()
	var b []byte
	var ids []string
	for i := range 3 {
		id := fmt.Sprintf("na-%d", i)
		ids = append(ids, id)
		b = fmt.Appendf(b, `{"custom_id":%q,"method":"POST","url":"/ai/run/%s","body":{"prompt":"hello %d"}}`+"\n", id, model, i)
	}
	in := filepath.Join(dir, "na.jsonl")
	writeFile(t, in, b)
	run := func(state string, emuArgs ...string) (int, string, string) {
		emu := startEmulator(t, emuArgs...)
		out := filepath.Join(dir, state+".out.jsonl")
		env := append(stateEnv(filepath.Join(dir, state)), "CLOUDFLARE_API_TOKEN=cf-test-token", "CLOUDFLARE_ACCOUNT_ID=acct1")
		r := runSluiceFor(t, 90*time.Second, env, "run", in, "--out", out, "--provider", "cloudflare",
			"--base-url", "http://"+emu.addr+"/client/v4", "--poll-interval", "20ms", "--max-poll-interval", "100ms", "--rate", "-1")
		return r.code, out, r.stderr
	}
	code, out, stderr := run("strict")
	if code != 4 {
		t.Fatalf("default emulator: exit %d, want 4\n%s", code, tail(stderr, 3000))
	}
	for _, l := range checkOutput(t, out, ids) {
		if l.Response != nil || l.Error == nil || !strings.Contains(l.Error.Message, "5007") || !strings.Contains(l.Error.Message, model) {
			t.Errorf("%s: %+v", l.CustomID, l.Error)
		}
	}
	code, out, stderr = run("any", "--cloudflare-any-model")
	if code != 0 {
		t.Fatalf("--cloudflare-any-model: exit %d\n%s", code, tail(stderr, 3000))
	}
	for _, l := range checkOutput(t, out, ids) {
		if l.Error != nil || l.Response == nil || l.Response.StatusCode != 200 {
			t.Errorf("%s: %+v %+v", l.CustomID, l.Response, l.Error)
		}
	}
}
