"""RL routing policies trained in the cluster simulator with TorchRL (losses, target updates,
replay buffers), exported to ONNX with their observation and action specs."""
