# Build stage: `npm ci` runs the `prepare` script (npm run build), so the
# sources must be in place before it.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json tsconfig.json tsconfig.build.json ./
COPY bin ./bin
COPY src ./src
COPY jobs ./jobs
COPY bench ./bench
COPY scripts ./scripts
RUN npm ci && npm prune --omit=dev

# Runtime stage: compiled code and production dependencies only.
FROM node:20-bookworm-slim
ENV NODE_ENV=production \
    SUBSYNC_DATA_DIR=/data
WORKDIR /app
COPY --from=build /app/package.json /app/package-lock.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY bin ./bin
COPY samples ./samples
# A named volume mounted on /data starts with this ownership.
RUN mkdir -p /data && chown node:node /data
USER node
VOLUME ["/data"]
CMD ["node", "bin/subsync.js", "--help"]
