// Package sluice holds the domain of the sluice batch runner: jobs, chunks,
// requests and their states, provider limits, the canonical input and output
// line types, and the interfaces (Provider, Codec) where the splitter,
// dispatcher, tracker, merger and provider packages meet.
//
// Glossary:
//
//   - Job: one input file driven through one provider to one output file.
//   - Chunk: a group of requests that share (url, model) and fit in one
//     provider batch. A chunk has an attempt number; requests that must be
//     retried are regrouped into new chunks of the next attempt.
//   - Request: one input line, known by its ordinal (0-based position among the
//     valid lines of the input) and its custom_id.
//   - Batch: the provider's object created from a chunk.
//
// Sibling packages never import each other; they meet at these types.
package sluice
