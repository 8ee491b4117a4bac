package bridge

// SourceURLs returns the URL each route of c subscribes with.
func SourceURLs(c Config) []string {
	out := make([]string, len(c.Routes))
	for i, r := range c.Routes {
		out[i] = sourceURL(r.From)
	}
	return out
}

// Pipelined reports whether route i of b forwards on the pipelined path.
func Pipelined(b *Bridge, i int) bool { return b.routes[i].pipelined() }
