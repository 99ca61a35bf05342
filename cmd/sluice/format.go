package main

// plural is n with the noun in the number it takes: "1 chunk", "2 chunks",
// "1,000 lines".
func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return commas(n) + " " + many
}
