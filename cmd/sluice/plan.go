package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/lifecycle"
	"github.com/sluice-batch/sluice/provider"
)

func newPlanCmd(g *globalFlags) *cobra.Command {
	var f jobFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "plan INPUT",
		Short: "Validate the input and show the batches a run would create; submits nothing",
		Long: `plan reads INPUT (plain, gzip or zstd JSONL in the OpenAI batch input format;
a file, or an object s3://BUCKET/KEY streamed in ranged reads),
validates every line, groups lines by (url, model), cuts chunks under the
provider's limits measured on its wire format, writes them into the job's
directory under the state directory, and prints the plan: per chunk the url,
model, request count, wire bytes, estimated input tokens, the limit that
closed it and its estimated cost, then the total cost expected and at most
(docs/money.md: prices, --prices, how estimates learn from finished
batches). With --reuse (the default), requests an earlier job already
bought are answered from its results and left out of the chunks. A later
'sluice run' of the same input reuses this plan.

A bad line stops planning with its file, line number, custom_id and reason
(exit 2), unless --skip-invalid is given.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := f.check(); err != nil {
				return err
			}
			p, err := f.preset()
			if err != nil {
				return err
			}
			prices, err := f.money.table()
			if err != nil {
				return err
			}
			log, err := g.logger(os.Stderr)
			if err != nil {
				return err
			}
			input, err := pathArg(args[0])
			if err != nil {
				return err
			}
			db, pr, _, closeJob, err := openJob(ctx, g, &f, p, input, log, nil)
			if err != nil {
				return err
			}
			defer closeJob()
			if pr.Reused {
				noteSkipInvalid(log, &f, pr)
			}
			chunks, err := db.Chunks(ctx, pr.Job.ID)
			if err != nil {
				return err
			}
			pm, err := newPlanMoney(ctx, db, pr.Job, prices)
			if err != nil {
				return err
			}
			if asJSON {
				return writePlanJSON(os.Stdout, pr, chunks, pm)
			}
			writePlanTable(os.Stdout, pr, p, chunks, pm)
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the plan as one JSON document")
	return cmd
}

type planJSON struct {
	Job      string          `json:"job"`
	Provider string          `json:"provider"`
	Input    string          `json:"input"`
	Requests int64           `json:"requests"`
	Rejected int64           `json:"rejected"`
	Bytes    int64           `json:"bytes"`
	Tokens   int64           `json:"est_tokens"`
	Limits   sluice.Limits   `json:"limits"`
	Reused   bool            `json:"reused"`
	Bounds   map[string]int  `json:"bounds"`
	Chunks   []planChunkJSON `json:"chunks"`
	Dir      string          `json:"dir"`
	planMoneyJSON
}

type planChunkJSON struct {
	ID        int64  `json:"id"`
	URL       string `json:"url"`
	Model     string `json:"model"`
	Requests  int    `json:"requests"`
	Bytes     int64  `json:"bytes"`
	EstTokens int64  `json:"est_tokens"`
	Bound     string `json:"bound"`
	File      string `json:"file"`
	chunkMoneyJSON
}

func planDoc(pr *lifecycle.Prepared, chunks []*sluice.Chunk, pm *planMoney) planJSON {
	doc := planJSON{Job: pr.Job.ID, Provider: pr.Job.Provider, Input: pr.Job.Input, Requests: pr.Job.Requests,
		Rejected: pr.Job.Rejected, Limits: pr.Job.Limits, Reused: pr.Reused, Bounds: map[string]int{},
		Chunks: []planChunkJSON{}, Dir: pr.Job.Dir}
	for _, c := range chunks {
		if c.Attempt != 1 {
			continue
		}
		doc.Bytes += c.Bytes
		doc.Tokens += c.EstTokens
		doc.Bounds[c.Bound]++
		doc.Chunks = append(doc.Chunks, planChunkJSON{ID: c.ID, URL: c.URL, Model: c.Model, Requests: c.Requests,
			Bytes: c.Bytes, EstTokens: c.EstTokens, Bound: c.Bound, File: filepath.Join(pr.Job.Dir, c.Path),
			chunkMoneyJSON: pm.chunk(c)})
	}
	doc.planMoneyJSON = pm.total(chunks)
	return doc
}

func writePlanJSON(w io.Writer, pr *lifecycle.Prepared, chunks []*sluice.Chunk, pm *planMoney) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(planDoc(pr, chunks, pm))
}

func writePlanTable(w io.Writer, pr *lifecycle.Prepared, p provider.Preset, chunks []*sluice.Chunk, pm *planMoney) {
	doc := planDoc(pr, chunks, pm)
	if pr.Reused {
		fmt.Fprintf(w, "job %s (planned before; input unchanged)\n", doc.Job)
	} else {
		fmt.Fprintf(w, "job %s\n", doc.Job)
	}
	fmt.Fprintf(w, "provider %s, input %s\n\n", doc.Provider, doc.Input)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "chunk\turl\tmodel\trequests\twire bytes\test tokens\tclosed by\test cost\t")
	for _, c := range doc.Chunks {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", c.ID, c.URL, c.Model, commas(int64(c.Requests)), humanBytes(c.Bytes), commas(c.EstTokens), c.Bound, costCell(c.EstCost))
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%s in %s, %s on the wire, ~%s input tokens", plural(doc.Requests, "request", "requests"),
		plural(int64(len(doc.Chunks)), "chunk", "chunks"), humanBytes(doc.Bytes), commas(doc.Tokens))
	if doc.Rejected > 0 {
		fmt.Fprintf(w, "; %s rejected (see %s)", plural(doc.Rejected, "bad line", "bad lines"), pr.Rejects)
	}
	fmt.Fprintln(w)
	l := doc.Limits
	limit := func(n int64, unit string) string {
		if n <= 0 {
			return "no " + unit + " limit"
		}
		// Exact: a 9,999,999-byte limit is not "10.00 MB".
		return plural(n, unit, unit+"s")
	}
	fmt.Fprintf(w, "limits per batch: %s, %s", limit(l.MaxBatchBytes, "byte"), limit(int64(l.MaxBatchRequests), "request"))
	if t := l.ChunkTokens(); t > 0 { // --max-batch-tokens, or 80% of --max-enqueued-tokens
		fmt.Fprintf(w, ", %s est. tokens", commas(t))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "chunks closed by: bytes limit %d, requests limit %d, tokens limit %d, end of their (url, model) group %d\n",
		doc.Bounds["bytes"], doc.Bounds["requests"], doc.Bounds["tokens"], doc.Bounds["end"])
	writePlanMoney(w, &doc.planMoneyJSON)
}

func humanBytes(n int64) string {
	if n <= 0 {
		return "no limit"
	}
	return sizeString(n)
}
