FROM python:3.11-slim
WORKDIR /opt/voxcast
COPY pyproject.toml README.md ./
COPY api ./api
COPY assembly ./assembly
COPY cli ./cli
COPY core ./core
COPY diffusion ./diffusion
COPY models ./models
COPY pipeline ./pipeline
COPY script_text ./script_text
COPY tokenizer ./tokenizer
COPY webui ./webui
COPY workers ./workers
RUN pip install --no-cache-dir .
ENTRYPOINT ["voxcast"]
