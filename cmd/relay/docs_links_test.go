package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocsLinks checks every relative link of README.md and docs/**/*.md:
// the file or directory it names exists, and its #anchor (in the same file
// or in another Markdown file) is a heading there, by GitHub's rule for
// heading anchors. Links to other sites are not followed.
func TestDocsLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	files := []string{filepath.Join(root, "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]map[string]bool{} // by cleaned path
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(b))
		anchors[path] = a
		return a, nil
	}
	checked := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, file)
		for _, l := range markdownLinks(string(b)) {
			target := l.target
			if i := strings.IndexAny(target, " \t"); i >= 0 { // [x](path "title")
				target = target[:i]
			}
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			path, frag, _ := strings.Cut(target, "#")
			dest := filepath.Clean(file)
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", rel, l.line, l.target, path)
					continue
				}
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s:%d: link %q: an anchor into a file that is not Markdown", rel, l.line, l.target)
				continue
			}
			a, err := anchorsOf(dest)
			if err != nil {
				t.Errorf("%s:%d: link %q: %v", rel, l.line, l.target, err)
				continue
			}
			if !a[frag] {
				t.Errorf("%s:%d: link %q: no heading with anchor #%s in %s", rel, l.line, l.target, frag, filepath.Base(dest))
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the link parser is broken")
	}
}

type mdLink struct {
	line   int
	target string
}

// linkRE matches an inline link or image, [text](target) or ![alt](target);
// the text may hold one level of brackets and spread over lines.
var linkRE = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(([^()\s]*(?:\([^()]*\))?[^()]*)\)`)

// markdownLinks returns the inline links of a Markdown text outside fenced
// code blocks and code spans.
func markdownLinks(text string) []mdLink {
	var out []mdLink
	lines := strings.Split(text, "\n")
	fence := ""
	var para []string
	start := 0
	flush := func() {
		block := strings.Join(para, "\n")
		block = codeSpanRE.ReplaceAllStringFunc(block, func(s string) string {
			return strings.Repeat(" ", len(s)-strings.Count(s, "\n")) + strings.Repeat("\n", strings.Count(s, "\n"))
		})
		for _, m := range linkRE.FindAllStringSubmatchIndex(block, -1) {
			out = append(out, mdLink{line: start + 1 + strings.Count(block[:m[0]], "\n"), target: block[m[2]:m[3]]})
		}
		para = para[:0]
	}
	for i, line := range lines {
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
				start = i + 1
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			flush()
			fence = trimmed[:3]
			continue
		}
		if strings.TrimSpace(line) == "" {
			flush()
			start = i + 1
			continue
		}
		if len(para) == 0 {
			start = i
		}
		para = append(para, line)
	}
	flush()
	return out
}

var codeSpanRE = regexp.MustCompile("`[^`]*`")

// headingAnchors returns the anchors GitHub gives the ATX headings of a
// Markdown text (outside fenced code): lower case, letters, digits, '-'
// and '_' kept, spaces turned into '-', everything else dropped; a repeated
// anchor gets -1, -2, ... Explicit <a name="..."> anchors count too.
func headingAnchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fence := ""
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		for _, m := range nameRE.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimLeft(line, "#")
		if h == "" || h[0] != ' ' {
			continue
		}
		slug := slugify(strings.TrimSpace(h))
		if n, ok := seen[slug]; ok {
			seen[slug] = n + 1
			slug = fmt.Sprintf("%s-%d", slug, n+1)
		} else {
			seen[slug] = 0
		}
		out[slug] = true
	}
	return out
}

var nameRE = regexp.MustCompile(`<a (?:name|id)="([^"]+)"`)

func slugify(h string) string {
	h = strings.ToLower(h)
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// The anchor rule and the link parser, on the cases the docs use.
func TestDocsLinkParsing(t *testing.T) {
	for h, want := range map[string]string{
		"Groups: size, overlap, crashes and freezes":                    "groups-size-overlap-crashes-and-freezes",
		"Position translation: `relay migrate offsets` (Kafka → Kafka)": "position-translation-relay-migrate-offsets-kafka--kafka",
		"Dedup: what \"exactly-once effect\" means here":                "dedup-what-exactly-once-effect-means-here",
		"`AWS_CA_BUNDLE`": "aws_ca_bundle",
	} {
		if got := slugify(h); got != want {
			t.Errorf("slugify(%q) = %q, want %q", h, got, want)
		}
	}
	text := "# A\n# A\nsee [x](b.md#a-1) and `[no](c.md)`\n```\n[no](d.md)\n```\n![img](e.png) [multi\nline](f.md)\n"
	var got []string
	for _, l := range markdownLinks(text) {
		got = append(got, fmt.Sprintf("%d:%s", l.line, l.target))
	}
	if want := "3:b.md#a-1 7:e.png 7:f.md"; strings.Join(got, " ") != want {
		t.Errorf("links = %v, want %s", got, want)
	}
	if a := headingAnchors(text); !a["a"] || !a["a-1"] {
		t.Errorf("anchors = %v, want a and a-1", a)
	}
}
