package provider_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
)

type entry struct {
	id      string
	created time.Time
	status  sluice.BatchStatus
}

// pages serves entries in pages of size, the token being the next index;
// it counts the pages asked.
func pages(all []entry, size int, asked *int) func(context.Context, string) (provider.Page[entry], error) {
	return func(_ context.Context, token string) (provider.Page[entry], error) {
		*asked++
		from, _ := strconv.Atoi(token)
		to := min(from+size, len(all))
		p := provider.Page[entry]{Items: all[from:to]}
		if to < len(all) {
			p.Next = strconv.Itoa(to)
		}
		return p, nil
	}
}

// TestListing: the walk stops at the last page and after a page entirely
// older than the cutoff; Adopt prefers the first live match to an ended
// one; First takes the first match.
func TestListing(t *testing.T) {
	now := time.Now()
	var all []entry
	for i := 0; i < 10; i++ {
		all = append(all, entry{id: strconv.Itoa(i), created: now.Add(-time.Duration(i) * time.Hour), status: sluice.BatchInProgress})
	}
	all[2].status = sluice.BatchFailed
	created := func(e *entry) time.Time { return e.created }
	status := func(e *entry) sluice.BatchStatus { return e.status }

	asked := 0
	l := provider.Listing[entry]{Page: pages(all, 3, &asked), Created: created}
	got, err := l.Adopt(context.Background(), func(e *entry) bool { return e.id == "2" || e.id == "7" }, status)
	if err != nil || got == nil || got.id != "7" || asked != 3 {
		t.Fatalf("Adopt: %+v %v after %d pages, want the live 7 after 3", got, err, asked)
	}
	asked = 0
	got, _ = l.Adopt(context.Background(), func(e *entry) bool { return e.id == "2" }, status)
	if got == nil || got.id != "2" || asked != 4 {
		t.Fatalf("Adopt of an ended batch only: %+v after %d pages, want 2 after all 4", got, asked)
	}
	// Entries 3..5 are older than the cutoff: the walk ends after their page.
	asked = 0
	l.Cutoff = now.Add(-150 * time.Minute)
	if got, _ := l.First(context.Background(), func(e *entry) bool { return e.id == "9" }); got != nil || asked != 2 {
		t.Fatalf("First past the cutoff: %+v after %d pages, want nothing after 2", got, asked)
	}
	asked = 0
	if got, _ := l.First(context.Background(), func(e *entry) bool { return e.id == "1" }); got == nil || got.id != "1" || asked != 1 {
		t.Fatalf("First: %+v after %d pages", got, asked)
	}
	// A server that repeats its token ends the walk.
	asked = 0
	loop := provider.Listing[entry]{Page: func(context.Context, string) (provider.Page[entry], error) {
		asked++
		return provider.Page[entry]{Items: all[:1], Next: "same"}, nil
	}}
	if got, _ := loop.First(context.Background(), func(*entry) bool { return false }); got != nil || asked != 2 {
		t.Fatalf("repeated token: %d pages", asked)
	}
	if provider.Cursor(false, "a", "b") != "" || provider.Cursor(true, "a", "b") != "a" || provider.Cursor(true, "", "b") != "b" {
		t.Fatal("Cursor")
	}
}

// TestNewBase: the family's preset by default, the preset's base URL and
// limits under the config's, the family's find window.
func TestNewBase(t *testing.T) {
	b, err := provider.NewBase(provider.Config{Limits: sluice.Limits{MaxBatchRequests: 7}}, provider.FamilyMistral,
		provider.Wire{FindWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if b.Name() != "mistral" || b.URL.String() != "https://api.mistral.ai" || b.Limits().MaxBatchRequests != 7 ||
		b.Limits().MaxBatchBytes != provider.Presets["mistral"].Limits.MaxBatchBytes || b.FindBack != time.Hour {
		t.Fatalf("base %+v", b)
	}
	if got := b.Join("/v1/files", map[string][]string{"a": {"b"}}); got != "https://api.mistral.ai/v1/files?a=b" {
		t.Fatalf("Join %s", got)
	}
	if _, err := provider.NewBase(provider.Config{Preset: provider.Presets["openai"]}, provider.FamilyMistral, provider.Wire{}); err == nil {
		t.Fatal("a preset of another family was taken")
	}
	if _, err := provider.NewBase(provider.Config{Preset: provider.Presets["azure"]}, provider.FamilyOpenAI, provider.Wire{}); err == nil {
		t.Fatal("azure without a base URL was taken")
	}
}
