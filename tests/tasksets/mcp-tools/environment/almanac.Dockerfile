FROM python:3.11-slim
COPY mcp_server.py /server.py
CMD ["python3", "/server.py", "--http", "8000"]
