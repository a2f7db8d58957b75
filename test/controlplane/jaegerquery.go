package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
)

// Span is a span as Jaeger's query API returns it, with its service and
// its parent (the span it is CHILD_OF in the same trace) resolved.
type Span struct {
	ID, TraceID, Name, Service string
	Parent                     *Span
	Start                      int64 // microseconds since the epoch
	Tags                       map[string]string
}

// jaegerTrace is one trace as /api/traces returns it.
type jaegerTrace struct {
	TraceID string `json:"traceID"`
	Spans   []struct {
		SpanID        string `json:"spanID"`
		OperationName string `json:"operationName"`
		ProcessID     string `json:"processID"`
		StartTime     int64  `json:"startTime"`
		References    []struct {
			RefType string `json:"refType"`
			TraceID string `json:"traceID"`
			SpanID  string `json:"spanID"`
		} `json:"references"`
		Tags []struct {
			Key   string `json:"key"`
			Value any    `json:"value"`
		} `json:"tags"`
	} `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

// Traces reads the traces of service from the query API, each as its
// spans with parents and services resolved.
func (j *Jaeger) Traces(ctx context.Context, service string) ([][]*Span, error) {
	u := j.Query + "/api/traces?" + url.Values{"service": {service}, "limit": {"1000"}, "lookback": {"1h"}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking jaeger for the traces of %s: %w", service, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("asking jaeger for the traces of %s: %s", service, resp.Status)
	}
	var body struct {
		Data []jaegerTrace `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("reading the traces of %s: %w", service, err)
	}
	out := make([][]*Span, 0, len(body.Data))
	for _, tr := range body.Data {
		out = append(out, resolve(tr))
	}
	return out, nil
}

// resolve turns a trace of the query API into its spans, parents linked.
func resolve(tr jaegerTrace) []*Span {
	byID := map[string]*Span{}
	spans := make([]*Span, 0, len(tr.Spans))
	for _, s := range tr.Spans {
		sp := &Span{ID: s.SpanID, TraceID: tr.TraceID, Name: s.OperationName, Service: tr.Processes[s.ProcessID].ServiceName,
			Start: s.StartTime, Tags: map[string]string{}}
		for _, t := range s.Tags {
			sp.Tags[t.Key] = fmt.Sprint(t.Value)
		}
		byID[s.SpanID] = sp
		spans = append(spans, sp)
	}
	for i, s := range tr.Spans {
		for _, r := range s.References {
			if r.RefType == "CHILD_OF" && r.TraceID == tr.TraceID {
				spans[i].Parent = byID[r.SpanID]
			}
		}
	}
	return spans
}

// RenderTrace draws the spans as a tree, children in the order they started,
// one line each: name [service] and the tags named in show.
func RenderTrace(spans []*Span, show ...string) string {
	children := map[*Span][]*Span{}
	var roots []*Span
	for _, s := range spans {
		if s.Parent == nil {
			roots = append(roots, s)
		} else {
			children[s.Parent] = append(children[s.Parent], s)
		}
	}
	var b strings.Builder
	var walk func(s *Span, depth int)
	walk = func(s *Span, depth int) {
		fmt.Fprintf(&b, "%s%s [%s]", strings.Repeat("  ", depth), s.Name, s.Service)
		for _, k := range show {
			if v, ok := s.Tags[k]; ok {
				fmt.Fprintf(&b, " %s=%s", k, v)
			}
		}
		b.WriteString("\n")
		kids := children[s]
		sort.Slice(kids, func(i, j int) bool { return kids[i].Start < kids[j].Start })
		for _, c := range kids {
			walk(c, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}

// TraceJSON is the trace id as the query API returns it (/api/traces/ID):
// the JSON that Jaeger's UI opens from a file.
func (j *Jaeger) TraceJSON(ctx context.Context, id string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.Query+"/api/traces/"+url.PathEscape(id), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking jaeger for trace %s: %w", id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("asking jaeger for trace %s: %s", id, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading trace %s: %w", id, err)
	}
	return body, nil
}
