// Package awsfake is a stateful AWS endpoint on loopback for tests and local runs: EC2, IAM, SSM,
// Pricing and SQS answer the real aws-sdk-go-v2 clients in their own protocols (EC2 and IAM
// query with XML, SSM, Pricing and SQS JSON), keep images, subnets, security groups, launch
// templates, fleets, instances, instance profiles and queues, and can inject what production
// does: insufficient capacity per offering, throttling, expired credentials.
//
// It is not part of Capstan: the product reaches it only through an endpoint URL, as it would
// reach AWS.
package awsfake

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"capstan.dev/capstan/internal/catalog"
)

// Zone is an availability zone.
type Zone struct{ Name, ID string }

// Options shape a new Server.
type Options struct {
	// Region is the region the endpoint serves (default us-east-1).
	Region string
	// ClusterName tags the default subnets and security group karpenter.sh/discovery=<name>.
	ClusterName string
	// Clock is the server's clock (default real).
	Clock clock.Clock
	// KubernetesVersions get AL2023 images and SSM parameters (default 1.34–1.37).
	KubernetesVersions []string
	// InstanceTypes narrows the catalog to these names (default: every priced type).
	InstanceTypes []string
}

// Server is the fake AWS.
type Server struct {
	region, account string
	clock           clock.Clock
	// cluster is the cluster the instances' user data must name to join.
	cluster string
	// eksCluster is what the EKS endpoint describes of it.
	eksCluster EKSCluster

	mu         sync.Mutex
	zones      []Zone
	subnets    map[string]*Subnet
	groups     map[string]*SecurityGroup
	images     map[string]*Image
	params     map[string]string
	types      []*instanceType
	templates  map[string]*LaunchTemplate
	instances  map[string]*Instance
	fleets     map[string][]string
	profiles   map[string]*InstanceProfile
	roles      map[string]bool
	queues     map[string]*queue
	noCapacity map[string]bool
	// reservations are the capacity reservations, by id.
	reservations map[string]*CapacityReservation
	faults       map[string][]Fault
	// rates are the faults injected at random (SetFaultRates); injected counts them.
	rates    *FaultRates
	rng      *mrand.Rand
	injected map[string]int
	expired  map[string]bool
	calls    map[string]int
	requests []Request
	seq      int

	listener net.Listener
	http     *http.Server
}

// Fault is an error injected into the next calls of an action.
type Fault struct {
	// Code and Message are the AWS error; Status the HTTP status (default 400).
	Code, Message string
	Status        int
	// After makes the call take effect before failing, as a lost answer does.
	After bool
}

// Request is a recorded call: the service, the action and its parameters (the query form for
// EC2 and IAM, the JSON body for the others).
type Request struct {
	Service, Action string
	Form            url.Values
	Body            []byte
}

// New returns a server with a default world: three zones, a tagged subnet per zone and an
// untagged one, a tagged security group, AL2023 images with their public SSM parameters, the
// node role "KarpenterNodeRole-<cluster>", the EC2 catalog with prices.
func New(o Options) (*Server, error) {
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.ClusterName == "" {
		o.ClusterName = "capstan-local"
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if len(o.KubernetesVersions) == 0 {
		o.KubernetesVersions = []string{"1.34", "1.35", "1.36", "1.37"}
	}
	s := &Server{
		region: o.Region, account: "123456789012", clock: o.Clock, cluster: o.ClusterName,
		eksCluster: EKSCluster{Endpoint: "https://" + strings.ToUpper(o.ClusterName) + ".gr7.us-east-1.eks.amazonaws.com", CABundle: "Q0E=",
			ServiceCIDR: "10.100.0.0/16", Version: "1.37"},
		subnets: map[string]*Subnet{}, groups: map[string]*SecurityGroup{}, images: map[string]*Image{},
		params: map[string]string{}, templates: map[string]*LaunchTemplate{}, instances: map[string]*Instance{},
		fleets: map[string][]string{}, profiles: map[string]*InstanceProfile{}, roles: map[string]bool{},
		queues: map[string]*queue{}, noCapacity: map[string]bool{}, reservations: map[string]*CapacityReservation{}, faults: map[string][]Fault{},
		injected: map[string]int{},
		expired:  map[string]bool{}, calls: map[string]int{},
	}
	entries, err := catalog.Load()
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if len(o.InstanceTypes) > 0 && !slices.Contains(o.InstanceTypes, e.Name) {
			continue
		}
		if it, ok := fromCatalog(e); ok {
			s.types = append(s.types, it)
		}
	}
	s.defaultWorld(o)
	return s, nil
}

// Start serves on a loopback port; URL is then its address.
func (s *Server) Start() error { return s.Listen("127.0.0.1:0") }

// Listen serves on addr.
func (s *Server) Listen(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	s.listener = l
	s.http = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.http.Serve(l) }()
	return nil
}

// URL is the endpoint to give the SDK clients (BaseEndpoint).
func (s *Server) URL() string { return "http://" + s.listener.Addr().String() }

// Close stops serving.
func (s *Server) Close() error {
	if s.http == nil {
		return nil
	}
	return s.http.Close()
}

// Region is the served region.
func (s *Server) Region() string { return s.region }

// InjectFault makes the next n calls of action (EC2 "CreateFleet", SQS "ReceiveMessage", …) fail.
func (s *Server) InjectFault(action string, n int, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.faults[action] = append(s.faults[action], f)
	}
}

// FaultRates make a share of EC2 calls fail as EC2 does under load — RequestLimitExceeded,
// InternalError or Unavailable, a mutating call (CreateFleet, TerminateInstances, CreateTags,
// CreateLaunchTemplate, DeleteLaunchTemplate) half the time after taking effect, its answer lost
// — and a share hang until the caller gives up.
type FaultRates struct {
	ErrorPercent, HangPercent int
	// Actions limits the faults to these EC2 actions; empty means every EC2 action.
	Actions []string
}

var mutating = []string{"CreateFleet", "TerminateInstances", "CreateTags", "CreateLaunchTemplate", "DeleteLaunchTemplate"}

// SetFaultRates injects faults at random from now on, drawn from seed; the zero FaultRates stops.
func (s *Server) SetFaultRates(r FaultRates, seed uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rates, s.rng = &r, mrand.New(mrand.NewPCG(seed, 0xfa))
	if r.ErrorPercent == 0 && r.HangPercent == 0 {
		s.rates = nil
	}
}

// InjectedFaults counts the faults SetFaultRates injected, by "Action error", "Action error
// after" (took effect) and "Action hang".
func (s *Server) InjectedFaults() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.injected)
}

// drawFault picks a random fault for an EC2 action (s.mu held): nil, or a fault, or hang.
func (s *Server) drawFault(action string) (f *Fault, hang bool) {
	r := s.rates
	if r == nil || len(r.Actions) > 0 && !slices.Contains(r.Actions, action) {
		return nil, false
	}
	n := s.rng.IntN(100)
	switch {
	case n < r.ErrorPercent:
		f = []*Fault{
			{Code: "RequestLimitExceeded", Message: "Request limit exceeded."},
			{Code: "InternalError", Message: "An internal error has occurred.", Status: http.StatusInternalServerError},
			{Code: "Unavailable", Message: "The server is overloaded and can't handle the request.", Status: http.StatusServiceUnavailable},
		}[s.rng.IntN(3)]
		f.After = slices.Contains(mutating, action) && s.rng.IntN(2) == 0
		key := action + " error"
		if f.After {
			key += " after"
		}
		s.injected[key]++
		return f, false
	case n < r.ErrorPercent+r.HangPercent:
		s.injected[action+" hang"]++
		return nil, true
	}
	return nil, false
}

// ExpireCredentials makes every call signed with accessKeyID fail as expired (or succeed again
// with expired false).
func (s *Server) ExpireCredentials(accessKeyID string, expired bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expired[accessKeyID] = expired
}

// Calls is how many times action was called.
func (s *Server) Calls(action string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[action]
}

// Requests are the recorded calls of action, oldest first.
func (s *Server) Requests(action string) []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Request
	for _, r := range s.requests {
		if r.Action == action {
			out = append(out, r)
		}
	}
	return out
}

// scopeRE reads the access key, region and service of a SigV4 Authorization header.
var scopeRE = regexp.MustCompile(`Credential=([^/]+)/\d{8}/([^/]+)/([^/]+)/aws4_request`)

// pricingRegions are where the Pricing API has endpoints.
var pricingRegions = []string{"us-east-1", "ap-south-1", "eu-central-1"}

// ServeHTTP dispatches by the service the request is signed for.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, AdminPrefix) {
		s.admin(w, r)
		return
	}
	m := scopeRE.FindStringSubmatch(r.Header.Get("Authorization"))
	if m == nil {
		http.Error(w, "missing SigV4 authorization", http.StatusForbidden)
		return
	}
	key, region, service := m[1], m[2], m[3]
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var action string
	var values url.Values
	switch service {
	case "ec2", "iam":
		values, err = url.ParseQuery(string(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		action = values.Get("Action")
	case "eks":
		// REST-JSON: the action is in the method and path.
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/clusters/") {
			action = "DescribeCluster"
		}
	default:
		_, action, _ = strings.Cut(r.Header.Get("X-Amz-Target"), ".")
	}
	s.mu.Lock()
	s.calls[action]++
	s.requests = append(s.requests, Request{Service: service, Action: action, Form: values, Body: body})
	var fault *Fault
	hang := false
	if fs := s.faults[action]; len(fs) > 0 {
		fault, s.faults[action] = &fs[0], fs[1:]
	} else if service == "ec2" {
		fault, hang = s.drawFault(action)
	}
	expired := s.expired[key]
	s.mu.Unlock()
	if hang {
		// No answer: the caller's deadline ends the request.
		<-r.Context().Done()
		return
	}
	// IAM is global: its calls are signed for us-east-1 (or the client's region when an
	// endpoint is set).
	regionOK := region == s.region || service == "iam" && region == "us-east-1"
	switch {
	case expired:
		fault = &Fault{Code: "ExpiredToken", Message: "The security token included in the request is expired", Status: http.StatusForbidden}
	case service == "pricing" && !slices.Contains(pricingRegions, region),
		service != "pricing" && !regionOK:
		fault = &Fault{Code: "AuthFailure", Message: fmt.Sprintf("Credential should be scoped to a valid region, not '%s'", region), Status: http.StatusUnauthorized}
	}
	if fault != nil && !fault.After {
		s.writeError(w, service, *fault)
		return
	}
	if fault != nil {
		// Do the work, then answer with the error.
		orig := w
		w = &discard{header: http.Header{}}
		defer s.writeError(orig, service, *fault)
	}
	switch service {
	case "ec2":
		s.ec2(w, action, newForm(values))
	case "iam":
		s.iam(w, action, newForm(values))
	case "ssm":
		s.ssm(w, action, body)
	case "pricing":
		s.pricing(w, action, body)
	case "sqs":
		s.sqs(w, r, action, body)
	case "eks":
		s.eks(w, action, strings.TrimPrefix(r.URL.Path, "/clusters/"))
	default:
		s.writeError(w, service, Fault{Code: "UnknownService", Message: "service " + service + " is not served here"})
	}
}

// apiError is an error a handler returns to the caller.
type apiError struct {
	Fault
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func errorf(code, format string, args ...any) *apiError {
	return &apiError{Fault{Code: code, Message: fmt.Sprintf(format, args...)}}
}

func (s *Server) writeError(w http.ResponseWriter, service string, f Fault) {
	status := f.Status
	if status == 0 {
		status = http.StatusBadRequest
		if f.Code == "RequestLimitExceeded" || f.Code == "Throttling" || f.Code == "ThrottlingException" {
			status = http.StatusServiceUnavailable
		}
	}
	switch service {
	case "ec2":
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, render(E("Response", E("Errors", E("Error", T("Code", f.Code), T("Message", f.Message))),
			T("RequestID", newID(""))), ""))
	case "iam":
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, render(E("ErrorResponse", E("Error", T("Type", "Sender"), T("Code", f.Code), T("Message", f.Message)),
			T("RequestId", newID(""))), "https://iam.amazonaws.com/doc/2010-05-08/"))
	default:
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		if service == "sqs" {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.Header().Set("X-Amzn-Query-Error", f.Code+";Sender")
		}
		if service == "eks" {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Amzn-Errortype", f.Code)
		}
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"__type": f.Code, "message": f.Message})
	}
}

// writeJSON answers a JSON-protocol call.
func writeJSON(w http.ResponseWriter, contentType string, v any) {
	w.Header().Set("Content-Type", contentType)
	_ = json.NewEncoder(w).Encode(v)
}

// newID is prefix plus 17 random hex digits, as EC2's ids.
func newID(prefix string) string {
	b := make([]byte, 9)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)[:17]
}

// discard is a ResponseWriter that drops the answer (a call whose answer is lost).
type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
