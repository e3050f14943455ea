package console

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Environment of TestBrowser.
const (
	// envURL points TestBrowser at a running console (e.g. the demo's)
	// instead of the fixture.
	envURL = "SWITCHYARD_CONSOLE_URL"
	// envShots is the directory TestBrowser writes its screenshots to
	// (default: the test's temporary directory).
	envShots = "SWITCHYARD_CONSOLE_SCREENSHOTS"
)

// chromium finds a Chromium binary. Outside CI a missing one skips the
// test; in CI (env CI set) it fails it: .ci/run installs chromium.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium not found on PATH (CI installs it in .ci/run: apt-get install chromium)")
	}
	t.Skip("chromium not installed (apt-get install chromium)")
	return ""
}

// browserErrors collects what the page reports: uncaught exceptions,
// console.error calls and error log entries (failed loads included).
type browserErrors struct {
	mu   sync.Mutex
	errs []string
}

func (b *browserErrors) add(s string) {
	b.mu.Lock()
	b.errs = append(b.errs, s)
	b.mu.Unlock()
}

func (b *browserErrors) take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.errs
	b.errs = nil
	return out
}

func (b *browserErrors) listen(ev any) {
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		b.add("exception: " + (&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error())
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
			var args []string
			for _, a := range ev.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			b.add("console." + string(ev.Type) + ": " + strings.Join(args, " "))
		}
	case *log.EventEntryAdded:
		if ev.Entry.Level == log.EntryLevelError {
			b.add(fmt.Sprintf("log (%s): %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
		}
	}
}

// TestBrowser loads every page of the console in headless Chromium,
// fails on any JavaScript exception, console error or failed load, checks
// that the live reload replaces the page's content, and saves a
// screenshot of each page. With SWITCHYARD_CONSOLE_URL it checks a
// running console (bench/console/screenshots.sh runs it against the demo
// and writes docs/console/).
func TestBrowser(t *testing.T) {
	exe := chromium(t)
	base := os.Getenv(envURL)
	if base == "" {
		f := newFixture(t, func(c *Config) { c.Refresh = time.Second }) // exercise the live reload
		base = f.server.URL + "/"
	}
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
	shots := os.Getenv(envShots)
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}

	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.WindowSize(1360, 900),
		chromedp.Flag("disable-gpu", true), chromedp.UserDataDir(t.TempDir()))...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	var errs browserErrors
	if err := chromedp.Listen(ctx, errs.listen); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}

	// visit loads path, checks it and screenshots it as name.png.
	visit := func(name, path string) {
		t.Helper()
		tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
		defer tcancel()
		resp, err := chromedp.Run(tctx, chromedp.NavigateResponse(base+path))
		if err != nil {
			t.Fatalf("%s: loading %s: %v", name, path, err)
		}
		if resp.Status != 200 {
			t.Errorf("%s: GET %s: status %d", name, path, resp.Status)
		}
		pageErr, err := chromedp.Run(tctx, chromedp.Evaluate[string](`(document.querySelector("main > p.error") || {}).textContent || ""`))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if pageErr != "" {
			t.Errorf("%s: the page shows an error: %s", name, pageErr)
		}
		png, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("%s: screenshot: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, e := range errs.take() {
			t.Errorf("%s (%s): %s", name, path, e)
		}
	}
	// link reads the first link matching a CSS selector on the current page.
	link := func(sel string) string {
		t.Helper()
		tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
		defer tcancel()
		href, err := chromedp.Run(tctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {getAttribute: () => ""}).getAttribute("href")`, sel)))
		if err != nil || href == "" {
			t.Fatalf("no link %s on the page (%v)", sel, err)
		}
		return href
	}

	visit("overview", "")
	cluster := link(`table.clusters a[href^="cluster?id="]`)
	// The live reload replaces <main> with the page fetched again.
	{
		tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
		if _, err := chromedp.Run(tctx, chromedp.Evaluate[chromedp.Void](`document.getElementById("main").dataset.old = "1"`)); err != nil {
			t.Fatal(err)
		}
		for {
			old, err := chromedp.Run(tctx, chromedp.Evaluate[bool](`document.getElementById("main").dataset.old === "1"`))
			if err != nil {
				t.Fatalf("waiting for the live reload: %v", err)
			}
			if !old {
				break
			}
			time.Sleep(50 * time.Millisecond) // polling the browser; the deadline bounds it
		}
		tcancel()
		for _, e := range errs.take() {
			t.Errorf("overview after a live reload: %s", e)
		}
	}
	visit("cluster", cluster)
	engine := link(`main table a[href^="engine?id="]`) // the cluster's heaviest engine
	visit("engines", "engines")
	visit("engine", engine)
	visit("explain", "explain")
	id, err := url.ParseQuery(strings.TrimPrefix(engine, "engine?"))
	if err != nil {
		t.Fatal(err)
	}
	visit("explain-engine", "explain?engine="+url.QueryEscape(id.Get("id")))
	visit("diff", "diff")
	visit("pipeline", "pipeline")
	t.Logf("screenshots in %s", shots)
}
