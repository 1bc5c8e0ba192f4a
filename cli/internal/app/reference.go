package app

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// referenceIntro opens docs/cli.md. It is written here rather than taken
// from the root command's Long because the reference needs a link to the
// README and a paragraph shaped for reading, not for a terminal.
const referenceIntro = "`pulse` is the operator command line for pulse. It is a client of " +
	"control-api's HTTP/JSON API only: it never talks to the database or to the " +
	"gateways. Each connection setting is taken from the flag, else the " +
	"environment (`PULSE_SERVER`, `PULSE_USER`, `PULSE_PASSWORD`, `PULSE_TOKEN`), " +
	"else the config file saved by `pulse login` (`<user config dir>/pulse/config.json`, " +
	"mode 0600); the server comes from the first source that names one, the " +
	"credential (user and password, or token) as a whole from the first source " +
	"that has one, and `pulse config` shows which source won. TLS: an `https://` " +
	"server is verified against the system's roots or `--ca-file`'s, and " +
	"`--client-cert`/`--client-key` present a client certificate to a server that " +
	"requires one (environment `PULSE_CA_FILE`, `PULSE_CLIENT_CERT`, `PULSE_CLIENT_KEY`); " +
	"credentials are never sent over plain `http://` to a host that is not loopback " +
	"unless `--allow-plaintext-credentials` (`PULSE_ALLOW_PLAINTEXT_CREDENTIALS=true`) " +
	"says the network is trusted. How to build it and " +
	"a one-screen overview: [cli/README.md](../cli/README.md)."

// referenceHeader says the file is generated, so nobody edits it by hand
// only to have the test reject the edit.
const referenceHeader = "<!-- Generated from the pulse command tree by WriteReference " +
	"(cli/internal/app/reference.go); do not edit. Regenerate with:\n" +
	"     PULSE_UPDATE_DOCS=1 go test ./cli/internal/app -run TestReference -->"

// WriteReference writes the Markdown reference of the pulse command line
// (docs/cli.md) from the command tree itself, so the reference says exactly
// what --help says and a test can keep the committed file true. The output
// is deterministic: no dates, and no path of the machine that renders it.
func WriteReference(w io.Writer) error {
	root := newRoot(&env{})
	// cobra merges the parents' persistent flags into a command only when
	// it runs or prints help; merge them all first, so UseLine adds
	// [flags] exactly where --help does.
	walkReference(root, func(c *cobra.Command, _ int) { c.LocalFlags() })
	genericDefaults(root)
	r := &referenceWriter{}

	r.printf("# pulse CLI reference\n\n%s\n\n%s\n\n", referenceHeader, referenceIntro)

	r.printf("## Global flags\n\nEvery command takes these, and `-h`/`--help`.\n\n")
	r.codeBlock("", root.PersistentFlags().FlagUsages())

	// exitCodesHelp is what `pulse --help` prints; its first line is the
	// heading, which the Markdown heading replaces.
	_, codes, _ := strings.Cut(exitCodesHelp, "\n")
	r.printf("## Exit codes\n\nErrors are one line on stderr, `pulse: <message>`.\n\n")
	r.codeBlock("", codes)

	r.printf("## Commands\n\n")
	walkReference(root, func(c *cobra.Command, depth int) {
		r.printf("%s- [%s](#%s) — %s\n", strings.Repeat("  ", depth), c.CommandPath(),
			anchor(c.CommandPath()), markdownText(c.Short))
	})
	r.printf("\n")
	walkReference(root, func(c *cobra.Command, _ int) {
		r.command(root, c)
	})

	// Sections end with a blank line; the file ends with one newline.
	_, err := w.Write(append(bytes.TrimRight(r.buf.Bytes(), "\n"), '\n'))
	return err
}

// walkReference visits the documented commands depth first, in the order
// --help lists them.
func walkReference(c *cobra.Command, visit func(c *cobra.Command, depth int)) {
	var walk func(c *cobra.Command, depth int)
	walk = func(c *cobra.Command, depth int) {
		visit(c, depth)
		for _, sub := range documentedSubcommands(c) {
			walk(sub, depth+1)
		}
	}
	walk(c, 0)
}

// documentedSubcommands leaves out hidden commands and cobra's own help and
// completion commands: they are not pulse's, and cobra adds them only when
// the tree is executed, so documenting them would depend on how the tree was
// obtained.
func documentedSubcommands(c *cobra.Command) []*cobra.Command {
	var subs []*cobra.Command
	for _, sub := range c.Commands() {
		if sub.Hidden {
			continue
		}
		if !c.HasParent() && (sub.Name() == "help" || sub.Name() == "completion") {
			continue
		}
		subs = append(subs, sub)
	}
	return subs
}

// referenceWriter builds the whole document in memory, so WriteReference
// reads as the document it produces and writes it in one piece.
type referenceWriter struct {
	buf bytes.Buffer
}

func (r *referenceWriter) printf(format string, a ...any) {
	fmt.Fprintf(&r.buf, format, a...)
}

func (r *referenceWriter) codeBlock(lang, body string) {
	r.printf("```%s\n%s\n```\n\n", lang, strings.TrimRight(dedent(body), "\n"))
}

// command writes one command's section. The root's Long is not repeated:
// the intro, global flags and exit codes above already say it.
func (r *referenceWriter) command(root, c *cobra.Command) {
	r.printf("## %s\n\n%s\n\n", c.CommandPath(), markdownText(c.Short))
	if c.Long != "" && c != root {
		r.printf("%s\n\n", markdownText(c.Long))
	}
	if c.Deprecated != "" {
		r.printf("**Deprecated:** %s\n\n", markdownText(c.Deprecated))
	}

	// The same usage lines cobra's help template prints.
	var usage []string
	if c.Runnable() && !isSubcommandGroup(c) {
		usage = append(usage, c.UseLine())
	}
	if len(documentedSubcommands(c)) > 0 {
		usage = append(usage, c.CommandPath()+" [command]")
	}
	r.codeBlock("", strings.Join(usage, "\n"))

	if len(c.Aliases) > 0 {
		r.printf("Aliases: `%s`\n\n", strings.Join(c.Aliases, "`, `"))
	}
	if subs := documentedSubcommands(c); len(subs) > 0 && c != root {
		r.printf("Commands:\n\n")
		for _, sub := range subs {
			r.printf("- [%s](#%s) — %s\n", sub.CommandPath(), anchor(sub.CommandPath()), markdownText(sub.Short))
		}
		r.printf("\n")
	}
	if c.Example != "" {
		r.printf("Examples:\n\n")
		r.codeBlock("sh", c.Example)
	}
	if flags := commandFlags(root, c); flags.HasFlags() {
		r.printf("Flags:\n\n")
		r.codeBlock("", flags.FlagUsages())
	}
}

// commandFlags is every flag c takes except the global ones: its local
// flags, and persistent flags of c or of a parent below the root, which
// LocalNonPersistentFlags alone would leave out of every section.
func commandFlags(root, c *cobra.Command) *pflag.FlagSet {
	fs := pflag.NewFlagSet(c.CommandPath(), pflag.ContinueOnError)
	fs.AddFlagSet(c.LocalNonPersistentFlags())
	if c == root {
		return fs
	}
	global := root.PersistentFlags()
	add := func(f *pflag.Flag) {
		if global.Lookup(f.Name) == nil {
			fs.AddFlag(f)
		}
	}
	c.PersistentFlags().VisitAll(add)
	c.InheritedFlags().VisitAll(add)
	return fs
}

// genericDefaults replaces the renderer's home and config directories in
// flag defaults, so a default derived from them (a config file path, say)
// reads the same in the committed reference whoever generated it.
func genericDefaults(root *cobra.Command) {
	var dirs [][2]string
	if d, err := os.UserConfigDir(); err == nil && len(d) > 1 {
		dirs = append(dirs, [2]string{d, "<user config dir>"})
	}
	if d, err := os.UserHomeDir(); err == nil && len(d) > 1 {
		dirs = append(dirs, [2]string{d, "~"})
	}
	generic := func(f *pflag.Flag) {
		for _, d := range dirs {
			f.DefValue = strings.ReplaceAll(f.DefValue, d[0], d[1])
		}
	}
	walkReference(root, func(c *cobra.Command, _ int) {
		c.Flags().VisitAll(generic)
		c.PersistentFlags().VisitAll(generic)
	})
}

// anchor is the fragment GitHub gives a "## pulse jobs list" heading.
func anchor(heading string) string {
	return strings.ReplaceAll(strings.ToLower(heading), " ", "-")
}

var (
	markdownInline = strings.NewReplacer(`\`, `\\`, `<`, `\<`, `>`, `\>`, `*`, `\*`, `[`, `\[`, `]`, `\]`)
	// A help-text line starting like a list item, heading or quote would
	// change the paragraph's shape once it is Markdown.
	markdownMarkerStart = regexp.MustCompile(`^(\s*)([-+#])(\s)`)
	markdownNumberStart = regexp.MustCompile(`^(\s*)(\d+)([.)])(\s)`)
)

// markdownText makes help text (written for a terminal) read as the same
// words in Markdown; backticks are kept, as the help text uses them for
// commands.
func markdownText(s string) string {
	lines := strings.Split(markdownInline.Replace(strings.TrimSpace(s)), "\n")
	for i, l := range lines {
		l = markdownMarkerStart.ReplaceAllString(l, `$1\$2$3`)
		lines[i] = markdownNumberStart.ReplaceAllString(l, `$1$2\$3$4`)
	}
	return strings.Join(lines, "\n")
}

// dedent removes the indentation common to all non-blank lines; help
// examples are indented for the terminal, code blocks need none.
func dedent(s string) string {
	lines := strings.Split(strings.Trim(s, "\n"), "\n")
	common := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " "))
		if common < 0 || n < common {
			common = n
		}
	}
	if common <= 0 {
		return strings.Join(lines, "\n")
	}
	for i, l := range lines {
		if len(l) >= common {
			lines[i] = l[common:]
		} else {
			lines[i] = strings.TrimLeft(l, " ")
		}
	}
	return strings.Join(lines, "\n")
}
