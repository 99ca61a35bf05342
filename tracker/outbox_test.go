package tracker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/check"
	"github.com/sluice-batch/sluice/tracker"
)

// TestOutbox runs the notification outbox's contract on SQLite and
// PostgreSQL: an event is recorded once per id and destination, two
// senders on separate connections racing for it never both win, a claim
// left by a killed sender is taken again only after its lease, and a
// settle by a sender whose lease passed on is refused.
func TestOutbox(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel() // a state directory or database of its own
			ctx := context.Background()
			db := b.open(t)
			now := time.Now() // the other handle reads the real clock
			db.SetClock(func() time.Time { return now })
			ob := db.Backend.(tracker.Outbox)
			n := tracker.Notification{ID: "evt_1", Dest: "d1", Job: "j", Type: "job.done", Body: []byte(`{"a":1}`)}
			for i, want := range []bool{true, false} {
				if ok, err := ob.RecordNotification(ctx, n); err != nil || ok != want {
					t.Fatalf("record #%d: %v %v, want %v", i, ok, err, want)
				}
			}
			// Two handles (two processes) race for the one row.
			other := db.reopen(t).(tracker.Outbox)
			var wg sync.WaitGroup
			won := make([]*tracker.Notification, 2)
			for i, o := range []tracker.Outbox{ob, other} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := o.ClaimNotification(ctx, []string{"d1", "d2"}, []string{"a", "b"}[i], time.Minute)
					if err != nil {
						t.Error(err)
					}
					won[i] = c
				}()
			}
			wg.Wait()
			if (won[0] == nil) == (won[1] == nil) {
				t.Fatalf("both or neither sender claimed the event: %v %v", won[0], won[1])
			}
			c := won[0]
			owner := "a"
			if c == nil {
				c, owner = won[1], "b"
			}
			if string(c.Body) != `{"a":1}` || c.Attempts != 1 || c.State != tracker.NoteSending {
				t.Fatalf("claimed %+v", c)
			}
			if again, _ := ob.ClaimNotification(ctx, []string{"d1"}, "c", time.Minute); again != nil {
				t.Fatalf("claimed twice within the lease: %+v", again)
			}
			if k, at, err := ob.NotificationsDue(ctx, []string{"d1"}); err != nil || k != 1 || at.Before(now.Add(time.Minute)) || at.After(now.Add(time.Minute+10*time.Second)) {
				t.Fatalf("due: %d %v %v", k, at, err)
			}
			// The sender dies; the lease passes; another takes it.
			now = now.Add(time.Minute + 10*time.Second)
			c2, err := ob.ClaimNotification(ctx, []string{"d1"}, "c", time.Minute)
			if err != nil || c2 == nil || c2.Attempts != 2 {
				t.Fatalf("after the lease: %+v %v", c2, err)
			}
			if err := ob.SettleNotification(ctx, c, owner, tracker.NoteDelivered, time.Time{}, ""); err == nil {
				t.Fatal("the first sender settled a row it no longer holds")
			}
			check.NoErr(t, "SettleNotification", ob.SettleNotification(ctx, c2, "c", tracker.NoteDelivered, time.Time{}, ""))
			if again, _ := ob.ClaimNotification(ctx, []string{"d1"}, "d", time.Minute); again != nil {
				t.Fatalf("a delivered event claimed again: %+v", again)
			}
			list, err := ob.Notifications(ctx, "j")
			if err != nil || len(list) != 1 || list[0].State != tracker.NoteDelivered || list[0].DeliveredAt.IsZero() {
				t.Fatalf("list: %+v %v", list, err)
			}
			// A failed attempt is tried again at its next time, not before.
			n.ID = "evt_2"
			ob.RecordNotification(ctx, n)
			c3, _ := ob.ClaimNotification(ctx, []string{"d1"}, "e", time.Minute)
			check.NoErr(t, "SettleNotification", ob.SettleNotification(ctx, c3, "e", tracker.NotePending, now.Add(5*time.Second), "503"))
			if early, _ := ob.ClaimNotification(ctx, []string{"d1"}, "e", time.Minute); early != nil {
				t.Fatal("claimed before its backoff")
			}
			now = now.Add(5 * time.Second)
			if late, _ := ob.ClaimNotification(ctx, []string{"d1"}, "e", time.Minute); late == nil || late.LastError != "503" {
				t.Fatalf("not claimed after its backoff: %+v", late)
			}
		})
	}
}

// TestOutboxClaimsRace: six senders on two handles (two processes) drain
// forty events at once; each event is claimed exactly once.
func TestOutboxClaimsRace(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel() // a state directory or database of its own
			ctx := context.Background()
			db := b.open(t)
			handles := []tracker.Outbox{db.Backend.(tracker.Outbox), db.reopen(t).(tracker.Outbox)}
			for i := range 40 {
				n := tracker.Notification{ID: fmt.Sprintf("evt_%02d", i), Dest: "d", Job: "j", Type: "job.done", Body: []byte("{}")}
				if _, err := handles[0].RecordNotification(ctx, n); err != nil {
					t.Fatal(err)
				}
			}
			var mu sync.Mutex
			claims := map[string]int{}
			var wg sync.WaitGroup
			for s := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						c, err := handles[s%2].ClaimNotification(ctx, []string{"d"}, fmt.Sprint("s", s), time.Minute)
						if err != nil {
							t.Error(err)
							return
						}
						if c == nil {
							return
						}
						mu.Lock()
						claims[c.ID]++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if len(claims) != 40 {
				t.Errorf("%d events claimed, want 40", len(claims))
			}
			for id, k := range claims {
				if k != 1 {
					t.Errorf("%s claimed %d times", id, k)
				}
			}
		})
	}
}

// testRealtimeCalls: the realtime fallback's log of synchronous calls, on
// each backend. A call's intent is recorded once; its answer only while it
// is in flight, once; the calls read back by chunk and index, and the
// chunks that have calls, in order.
func testRealtimeCalls(t *testing.T, db *testDB) {
	ctx := context.Background()
	planJob(t, db, "j", 2)
	for _, k := range []struct {
		chunk int64
		index int
	}{{3, 1}, {3, 0}, {1, 0}} {
		if ok, err := db.RealtimeIntent(ctx, "j", k.chunk, k.index); err != nil || !ok {
			t.Fatalf("intent %d/%d: %v, %v", k.chunk, k.index, ok, err)
		}
	}
	if ok, err := db.RealtimeIntent(ctx, "j", 3, 1); err != nil || ok {
		t.Errorf("a second intent of 3/1: %v, %v; want not recorded", ok, err)
	}
	answer := sluice.RealtimeCall{Chunk: 3, Index: 1, Kind: sluice.ResultKind(1), Line: []byte(`{"id":"x"}`),
		Usage: sluice.Usage{InputTokens: 7, OutputTokens: 5}}
	check.NoErr(t, "RealtimeAnswer", db.RealtimeAnswer(ctx, "j", answer))
	if err := db.RealtimeAnswer(ctx, "j", answer); !errors.Is(err, tracker.ErrConflict) {
		t.Errorf("a second answer of 3/1: %v, want ErrConflict", err)
	}
	if err := db.RealtimeAnswer(ctx, "j", sluice.RealtimeCall{Chunk: 2, Index: 0}); !errors.Is(err, tracker.ErrConflict) {
		t.Errorf("an answer of a call never sent: %v, want ErrConflict", err)
	}
	chunks, err := db.RealtimeChunks(ctx, "j")
	if err != nil || len(chunks) != 2 || chunks[0] != 1 || chunks[1] != 3 {
		t.Errorf("RealtimeChunks = %v, %v; want [1 3]", chunks, err)
	}
	calls, err := db.RealtimeCalls(ctx, "j", 3)
	if err != nil || len(calls) != 2 {
		t.Fatalf("RealtimeCalls = %+v, %v", calls, err)
	}
	if c := calls[0]; c.Chunk != 3 || c.Index != 0 || c.State != sluice.RealtimeSending {
		t.Errorf("call 3/0 = %+v, want in flight", c)
	}
	if c := calls[1]; c.Index != 1 || c.State != sluice.RealtimeAnswered || c.Kind != answer.Kind ||
		string(c.Line) != string(answer.Line) || c.Usage != answer.Usage {
		t.Errorf("call 3/1 = %+v, want %+v answered", c, answer)
	}
	if other, err := db.RealtimeChunks(ctx, "other"); err != nil || len(other) != 0 {
		t.Errorf("RealtimeChunks of another job = %v, %v", other, err)
	}
}
