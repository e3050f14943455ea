package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/httpserver"
)

// adminServer serves /health and /metrics on their own listener
// (AdminListen), so that the API's listener can be exposed without them
// and a flood of API requests cannot starve them.
type adminServer struct {
	ln  net.Listener
	srv *http.Server
}

// listenAdmin listens on AdminListen (nil when unset).
func (g *Gateway) listenAdmin() (*adminServer, error) {
	if g.cfg.adminListen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", g.cfg.adminListen)
	if err != nil {
		return nil, fmt.Errorf("listening on %s (admin): %w", g.cfg.adminListen, err)
	}
	addr := ln.Addr().String()
	g.adminAddr.Store(&addr)
	g.log.Info("admin listening", "addr", addr)
	mux := http.NewServeMux()
	g.adminRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, typeInvalid, "unknown_url", "", "unknown URL "+r.URL.Path)
	})
	return &adminServer{ln: ln, srv: &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: httpserver.ReadHeaderTimeout,
		IdleTimeout:       httpserver.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}}, nil
}

// serve serves until ctx ends, then shuts down (at most 5s).
func (a *adminServer) serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := a.srv.Shutdown(sctx); err != nil {
			_ = a.srv.Close()
		}
	})
	defer stop()
	if err := a.srv.Serve(a.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving admin: %w", err)
	}
	return nil
}

// AdminAddr returns the admin listener's address once Run listens, else
// "" (also without AdminListen).
func (g *Gateway) AdminAddr() string {
	if a := g.adminAddr.Load(); a != nil {
		return *a
	}
	return ""
}
