package console

import (
	"context"
	"net/http"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kadmClient is an admin client on cl (it does not own cl).
func kadmClient(cl *kgo.Client) *kadm.Client { return kadm.NewClient(cl) }

// contextFor bounds a request's work.
func contextFor(r *http.Request, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d)
}
