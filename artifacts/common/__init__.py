"""What every room of the runtime leans on and nothing of routing: the extension registries (`extensions`),
strict JSON reading and writing, the local state folder and temporary folders, and how an OpenAI stream's
chunks are read. Imports nothing else of routeforge."""
