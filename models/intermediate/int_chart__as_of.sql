{{ config(materialized='table', order_by='tuple()') }}

{#- One row: the snapshot time this build ranks at, aligned down to the bucket, the default
    policy, every policy it ranks with, the depth it keeps, and no totals (the snapshot
    summary every board's publication reads: as_of, policy, policies, stats). The publisher reads it back,
    so the alignment rule is applied here only. -#}

with

final as (

    select
        {{ align_as_of(none if var('as_of') is none else "'" ~ var('as_of') ~ "'") }} as as_of,
        '{{ var("policy") }}' as policy,
        [{% for policy in var('policies') %}'{{ policy }}'{{ ", " if not loop.last }}{% endfor %}] as policies,
        toUInt32({{ var('keep_top') }}) as keep_top,
        map() :: Map(LowCardinality(String), Float64) as stats

)

select * from final
