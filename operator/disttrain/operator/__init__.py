"""The operator's shell: kopf handlers, informers, the work queue, leader election,
metrics and every API write (client-go's job controller is the shape). The decisions it
carries out are pure and live in `disttrain.operator.core`; `python -m disttrain.operator`
(the image's `disttrain-operator`) starts it."""
