package chart

import (
	"fmt"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/celpolicy"
	"github.com/gpuslice/gpuslice/internal/yamldocs"
)

// object is one rendered document.
type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	doc []byte
}

func (o object) String() string { return o.Kind + " " + o.Metadata.Name }

// split reads helm template's output into its objects (comment-only
// documents, which templates that render nothing leave, are dropped).
func split(out []byte) ([]object, error) {
	docs, err := yamldocs.Split(out)
	if err != nil {
		return nil, err
	}
	var objs []object
	for _, doc := range docs {
		var o object
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return nil, fmt.Errorf("%v in\n%s", err, doc)
		}
		if o.Kind == "" && o.APIVersion == "" {
			continue
		}
		o.doc = doc
		objs = append(objs, o)
	}
	return objs, nil
}

// strictScheme knows every type of k8s.io/api (client-go's scheme) and the
// Prometheus operator's monitoring.coreos.com/v1.
var strictScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := scheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := monitoringv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

// strict is the API machinery's YAML serializer in strict mode: an
// unknown or duplicate field is an error.
var strict = json.NewSerializerWithOptions(json.DefaultMetaFactory, strictScheme, strictScheme,
	json.SerializerOptions{Yaml: true, Strict: true})

// decodeStrict decodes doc into its Go type: the scheme's, or for
// cert-manager's (whose Go module is not a dependency) certManagerTypes.
func decodeStrict(doc []byte) (runtime.Object, error) {
	var head metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return nil, err
	}
	if head.APIVersion == "cert-manager.io/v1" {
		into, ok := certManagerTypes[head.Kind]
		if !ok {
			return nil, fmt.Errorf("no type for cert-manager.io/v1 %s", head.Kind)
		}
		v := into()
		return nil, yaml.UnmarshalStrict(doc, v)
	}
	obj, _, err := strict.Decode(doc, nil, nil)
	return obj, err
}

// compileCEL compiles a policy's expressions, and a webhook's match
// conditions, as the API server (every supported release) would.
func compileCEL(obj runtime.Object) error {
	switch o := obj.(type) {
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		_, err := celpolicy.Compile(o)
		return err
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		for i := range o.Webhooks {
			if _, err := celpolicy.CompileMatchConditions(&o.Webhooks[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkLabels: the labels the release's objects are found by (the deploy
// test lists by instance after helm uninstall).
func checkLabels(o object) error {
	for k, want := range map[string]string{"app.kubernetes.io/instance": release, "app.kubernetes.io/part-of": "gpuslice"} {
		if got := o.Metadata.Labels[k]; got != want {
			return fmt.Errorf("label %s=%q, want %q", k, got, want)
		}
	}
	return nil
}

// certManagerTypes are the cert-manager.io/v1 kinds the chart renders,
// with the fields of cert-manager's API that it uses (a subset: strict
// decoding refuses any other, as the CRD's schema would refuse an
// unknown one).
var certManagerTypes = map[string]func() any{
	"Issuer":      func() any { return &cmIssuer{} },
	"Certificate": func() any { return &cmCertificate{} },
}

type cmIssuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SelfSigned *struct{} `json:"selfSigned"`
	} `json:"spec"`
}

type cmCertificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SecretName string `json:"secretName"`
		IssuerRef  struct {
			Name  string `json:"name"`
			Kind  string `json:"kind,omitempty"`
			Group string `json:"group,omitempty"`
		} `json:"issuerRef"`
		DNSNames   []string `json:"dnsNames"`
		PrivateKey struct {
			Algorithm      string `json:"algorithm"`
			Size           int    `json:"size"`
			RotationPolicy string `json:"rotationPolicy"`
		} `json:"privateKey"`
		Duration    string `json:"duration"`
		RenewBefore string `json:"renewBefore"`
	} `json:"spec"`
}
