package splitter

import "math/bits"

// idSet is the in-memory filter of custom_ids seen so far: 48 bits of each
// id's 64-bit xxh3 hash, in 65,536 small open-addressing tables of uint32
// (the top 16 bits pick the table, the next 32 are stored). About 6 bytes
// per id at the average load, so 4 million ids take ~25 MB; a table grows
// on its own, so growth never copies more than a sliver of the whole.
//
// A hit is only a "maybe": two different ids share 48 bits with
// probability 2^-48, so a file of n ids sees about n²/2^49 false hits
// (0.03 for 4 million). The splitter confirms every hit with the plan
// sink (SQLite, once the rows queued for it are recorded) before calling a
// line a duplicate.
type idSet struct {
	tabs [1 << 16][]uint32
	n    [1 << 16]uint16 // entries per table (a table never holds 2^16)
}

// add records h and reports whether it (maybe) was there already.
func (s *idSet) add(h uint64) (seen bool) {
	ti := h >> 48
	fp := uint32(h >> 16)
	if fp == 0 {
		fp = 1 // 0 marks an empty slot
	}
	t := s.tabs[ti]
	if len(t) == 0 {
		t = make([]uint32, 4)
		s.tabs[ti] = t
	}
	mask := uint32(len(t) - 1)
	shift := 32 - bits.Len32(mask)
	for i := home(fp, shift) & mask; ; i = (i + 1) & mask {
		switch t[i] {
		case fp:
			return true
		case 0:
			t[i] = fp
			s.n[ti]++
			if int(s.n[ti])*4 >= len(t)*3 {
				s.tabs[ti] = grow(t)
			}
			return false
		}
	}
}

// home is a fingerprint's first slot: its top bits, so a table can be
// rehashed from what it stores.
func home(fp uint32, shift int) uint32 {
	if shift >= 32 {
		return 0
	}
	return fp >> shift
}

func grow(t []uint32) []uint32 {
	n := make([]uint32, 2*len(t))
	mask := uint32(len(n) - 1)
	shift := 32 - bits.Len32(mask)
	for _, fp := range t {
		if fp == 0 {
			continue
		}
		i := home(fp, shift) & mask
		for n[i] != 0 {
			i = (i + 1) & mask
		}
		n[i] = fp
	}
	return n
}
